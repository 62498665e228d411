"""``python -m reconciler explain|list`` and the kubectl plugin ``kubectl gpures``.

The shell around ``reconciler.explain.explain``: it reads the pod, its Events, the owner's
GPUReservations and GPU pods, and the controller's leader Lease (is a leader running,
and the app health it publishes) with the caller's own kubeconfig (no controller API),
builds a ``Scene`` and prints what the pure functions say. Kubeconfig files are chosen
and merged as kubectl does (``kubeconfig_files``, ``current_context``). Reads that are refused
(RBAC) or fail degrade to a note; only a pod that cannot be read at all is an error.

Exit codes: 0 done, 1 the pod or namespace could not be read, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import yaml

from reconciler import leader
from reconciler.base.apphealth import parse_health
from reconciler.base.pods import PodView, project_pod
from reconciler.explain import explain
from reconciler.explain.scene import Controller, Said, Scene
from reconciler.usage import cli as usage_cli
from shared import model, vocab
from shared.clock import Clock, parse_utc
from shared.errors import KubeError, NotFound
from shared.gateway import Gateway
from shared.policy.matching import MatchRules
from shared.resources import EVENTS, GPU_RESERVATIONS, LEASES, PODS
from shared.settings import EnvReader, read_clock

COMMANDS = ("explain", "list", "usage")
#: What the plugin is called as (``kubectl gpures …``), for usage texts.
PLUGIN = f"kubectl {vocab.CRD_SHORT_NAME}"


@dataclass(frozen=True)
class Context:
    """Where to read from, and how to render."""

    gateway: Gateway
    controller_namespace: str
    clock: Clock
    zone: ZoneInfo | None
    rules: MatchRules


def _common(suppress: bool) -> argparse.ArgumentParser:
    """The connection options, accepted before and after the command (as kubectl does)."""
    keep: Any = argparse.SUPPRESS if suppress else None
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--kubeconfig",
        default=keep,
        help="kubeconfig file (default: the files of $KUBECONFIG, merged, else ~/.kube/config)",
    )
    common.add_argument(
        "--context", default=keep, help="kubeconfig context (default: its current-context)"
    )
    common.add_argument(
        "-n", "--namespace", default=keep, help="namespace (default: the kubeconfig context's)"
    )
    common.add_argument(
        "--controller-namespace",
        default=argparse.SUPPRESS
        if suppress
        else os.environ.get("GPURES_CONTROLLER_NAMESPACE", vocab.PRODUCT_NAME),
        help=f"namespace of the GPUReservation objects (default: {vocab.PRODUCT_NAME})",
    )
    return common


def parser(prog: str) -> argparse.ArgumentParser:
    """The arguments of both entry points (kubectl passes everything after the name)."""
    top = argparse.ArgumentParser(
        prog=prog,
        description="Why is my GPU pod pending, and what are my bookings.",
        parents=[_common(suppress=False)],
    )
    sub = top.add_subparsers(dest="command", required=True)
    inner = [_common(suppress=True)]
    one = sub.add_parser(
        "explain", parents=inner, help="say what holds a pod and what would release it"
    )
    one.add_argument("pod", help="<pod> or <namespace>/<pod>")
    listing = sub.add_parser(
        "list", parents=inner, help="your bookings and your GPU pods with a wait estimate"
    )
    listing.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        help="every namespace you may list (each pod with its own namespace's bookings)",
    )
    usage_cli.add_parser(sub, inner)
    return top


class NoKubeconfig(Exception):
    """No kubeconfig file to read: the message names every file tried."""


def kubeconfig_files(given: str | None, env: Mapping[str, str]) -> tuple[str, ...]:
    """kubectl's choice of files: ``--kubeconfig`` (that file only), else every file of
    ``$KUBECONFIG`` that exists (missing ones skipped), else ``~/.kube/config``.
    ``NoKubeconfig`` naming the files tried when none exists."""
    if given:
        tried = [given]
    else:
        tried = [p for p in (env.get("KUBECONFIG") or "").split(os.pathsep) if p]
        tried = tried or [str(Path.home() / ".kube" / "config")]
    found = tuple(p for p in tried if Path(p).is_file())
    if not found or (given and found != (given,)):
        raise NoKubeconfig(f"no such file: {', '.join(tried)}")
    return found


def _read(path: str) -> dict[str, Any]:
    try:
        config = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    return config if isinstance(config, dict) else {}


def current_context(files: str | Sequence[str]) -> str | None:
    """The ``current-context`` of the first file that sets one (kubectl's merge: the
    first file wins per key)."""
    for path in [files] if isinstance(files, str) else files:
        name = _read(path).get("current-context")
        if isinstance(name, str) and name:
            return name
    return None


def context_namespace(files: str | Sequence[str], context: str | None = None) -> str:
    """The namespace of ``context`` (default: the current one) as kubectl reads it over
    merged files (the first file defining a context name wins); ``default`` otherwise."""
    paths = [files] if isinstance(files, str) else list(files)
    name = context or current_context(paths)
    for path in paths:
        entries = _read(path).get("contexts")
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict) and entry.get("name") == name:
                inner = entry.get("context")
                found = inner.get("namespace") if isinstance(inner, dict) else None
                return str(found) if isinstance(found, str) and found else "default"
    return "default"


def target(pod: str, namespace: str) -> tuple[str, str]:
    """``<ns>/<pod>`` or ``<pod>`` in ``namespace``; ValueError when malformed."""
    ns, slash, name = pod.rpartition("/")
    ns = ns if slash else namespace
    if not name or "/" in ns or not ns:
        raise ValueError(f"not a pod name: {pod!r} (use <pod> or <namespace>/<pod>)")
    return ns, name


def _unschedulable(pod: dict[str, Any]) -> str | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if not isinstance(cond, dict) or cond.get("type") != "PodScheduled":
            continue
        if cond.get("status") == "False" and cond.get("message"):
            return str(cond["message"])
    return None


def _when(event: dict[str, Any]) -> datetime | None:
    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        value = event.get(key)
        if isinstance(value, str) and value:
            try:
                return parse_utc(value)
            except ValueError:
                continue
    return None


def ours(events: Sequence[dict[str, Any]]) -> tuple[Said, ...]:
    """The reservation system's Events, oldest first (malformed ones skipped)."""
    found = []
    for event in events:
        source = (event.get("source") or {}).get("component")
        if vocab.PRODUCT_NAME not in (source, event.get("reportingComponent")):
            continue
        reason, message = event.get("reason"), event.get("message")
        if isinstance(reason, str) and isinstance(message, str):
            kind = str(event.get("type") or "Normal")
            found.append(Said(reason, message, _when(event), kind))
    return tuple(sorted(found, key=lambda s: s.at or datetime.min.replace(tzinfo=UTC)))


async def owned_reservations(
    ctx: Context, owner: str | None
) -> tuple[tuple[model.GPUReservation, ...] | None, str | None]:
    """The owner's GPUReservations (every readable one for ``None``), or None and why
    they could not be read."""
    try:
        listed = await ctx.gateway.list_all(GPU_RESERVATIONS, ctx.controller_namespace)
    except KubeError as exc:
        return None, f"{exc.reason or exc.code}: {exc.message}"
    found = []
    for obj in listed.items:
        try:
            res = model.from_object(obj)
        except (ValueError, TypeError, KeyError):
            continue
        if owner is None or res.facts.owner == owner:
            found.append(res)
    return tuple(found), None


def projected(
    items: Sequence[dict[str, Any]], rules: MatchRules
) -> list[tuple[dict[str, Any], PodView]]:
    """The GPU pods among ``items``, raw and projected, by name."""
    pairs = [(raw, gpu_view(raw, rules)) for raw in items]
    return sorted(((r, v) for r, v in pairs if v is not None), key=lambda pair: pair[1].name)


def gpu_view(raw: dict[str, Any], rules: MatchRules) -> PodView | None:
    """``raw`` projected when it is a GPU pod (the explainer's subject); None for the
    slim views the backstop's cache also keeps."""
    view = project_pod(raw, rules)
    return view if view is not None and view.gpu_pod else None


async def neighbours_of(ctx: Context, namespace: str) -> tuple[PodView, ...]:
    """The namespace's GPU pods for naming holders (none when they cannot be listed)."""
    try:
        listed = await ctx.gateway.list_all(PODS, namespace)
    except KubeError:
        return ()
    return tuple(view for _raw, view in projected(listed.items, ctx.rules))


async def controller_of(ctx: Context) -> Controller | None:
    """The controller's leader Lease as the user may read it (the chart's userAccess
    grants ``get`` on that one Lease); None when it cannot be read (nothing is said)."""
    try:
        raw = await ctx.gateway.get(LEASES, vocab.LEADER_LEASE_NAME, ctx.controller_namespace)
    except NotFound:
        return Controller(found=False)
    except KubeError:
        return None
    view = leader.view_of(raw)
    notes = (raw.get("metadata") or {}).get("annotations")
    health = (
        parse_health(notes.get(vocab.APP_HEALTH_ANNOTATION)) if isinstance(notes, dict) else None
    )
    return Controller(True, view.holder, view.renewed, view.duration_s, health)


async def pod_events(ctx: Context, pod: dict[str, Any]) -> tuple[Said, ...]:
    meta = pod.get("metadata") or {}
    selector = f"involvedObject.uid={meta.get('uid', '')}"
    try:
        listed = await ctx.gateway.list_all(EVENTS, meta.get("namespace"), field_selector=selector)
    except KubeError:
        return ()
    return ours(listed.items)


async def scene_of(
    ctx: Context,
    raw: dict[str, Any],
    reservations: tuple[tuple[model.GPUReservation, ...] | None, str | None],
    neighbours: tuple[PodView, ...],
    controller: Controller | None = None,
) -> Scene:
    meta = raw.get("metadata") or {}
    return Scene(
        key=f"{meta.get('namespace')}/{meta.get('name')}",
        pod=gpu_view(raw, ctx.rules),
        now=ctx.clock.now(),
        zone=ctx.zone,
        unschedulable=_unschedulable(raw),
        said=await pod_events(ctx, raw),
        reservations=reservations[0],
        unreadable=reservations[1],
        neighbours=neighbours,
        rules=ctx.rules,
        controller=controller,
    )


async def run_explain(ctx: Context, namespace: str, name: str) -> str:
    """The explanation of one pod; NotFound/KubeError when the pod cannot be read."""
    raw = await ctx.gateway.get(PODS, name, namespace)
    reservations = await owned_reservations(ctx, namespace)
    neighbours = await neighbours_of(ctx, namespace)
    scene = await scene_of(ctx, raw, reservations, neighbours, await controller_of(ctx))
    return explain.render(scene, explain.explain(scene))


async def run_list(ctx: Context, namespace: str | None) -> str:
    """The owner's bookings, then their GPU pods with state and estimate (KubeError when
    the pods cannot be listed). ``namespace`` None (``-A``): every namespace the user
    may list, each pod read against its own namespace's bookings."""
    reservations = await owned_reservations(ctx, namespace)
    found = projected((await ctx.gateway.list_all(PODS, namespace)).items, ctx.rules)
    controller = await controller_of(ctx)
    everywhere = namespace is None
    whose = "anyone" if everywhere else namespace
    if reservations[0] is None:
        head = f"Your GPUReservations could not be read: {reservations[1]}."
    elif reservations[0]:
        head = explain.bookings(reservations[0], ctx.clock.now(), ctx.zone, owners=everywhere)
    else:
        head = f"No bookings for {whose}."
    scenes = []
    for raw, view in found:
        if view.finished:
            continue
        mine = reservations
        if reservations[0] is not None:
            mine = (tuple(r for r in reservations[0] if r.facts.owner == view.namespace), None)
        neighbours = tuple(v for _r, v in found if v.namespace == view.namespace)
        scenes.append(await scene_of(ctx, raw, mine, neighbours, controller))
    where = "any namespace" if everywhere else namespace
    tail = explain.pods(scenes, namespaces=everywhere) if scenes else f"No GPU pods in {where}."
    return f"{head}\n\n{tail}"


def main(argv: Sequence[str] | None = None, prog: str = "python -m reconciler") -> int:
    """Entry point of ``python -m reconciler explain|list``."""
    args = parser(prog).parse_args(argv)
    env = dict(os.environ)
    reader = EnvReader(env)
    try:
        files = kubeconfig_files(args.kubeconfig, env)
    except NoKubeconfig as exc:
        print(f"{prog}: cannot load kubeconfig: {exc}", file=sys.stderr)
        return 1
    context = args.context or current_context(files)
    namespace = args.namespace or context_namespace(files, context)
    try:
        # K8S_TLS_STRICT_VERIFY=false: the processes' escape hatch for a cluster PKI
        # without Authority Key Identifiers works for the plugin too.
        strict = reader.boolean("K8S_TLS_STRICT_VERIFY", True, strict=False)
        gateway = Gateway.from_kubeconfig(files, context, strict_tls=strict)
    except Exception as exc:  # the client library raises its own types for bad files
        print(f"{prog}: cannot load kubeconfig {', '.join(files)}: {exc}", file=sys.stderr)
        return 1
    ctx = Context(
        gateway,
        args.controller_namespace,
        read_clock(reader).build(),
        reader.timezone("TZ", None),
        MatchRules(),
    )
    try:
        if args.command == "list":
            text = asyncio.run(run_list(ctx, None if args.all_namespaces else namespace))
        elif args.command == "usage":
            owner = None if args.all_namespaces else namespace
            try:
                text = asyncio.run(usage_cli.run(ctx, owner, args))
            except (ValueError, RuntimeError) as exc:
                print(f"{prog}: {exc}", file=sys.stderr)
                return 2
        else:
            try:
                ns, name = target(args.pod, namespace)
            except ValueError as exc:
                print(f"{prog}: {exc}", file=sys.stderr)
                return 2
            text = asyncio.run(run_explain(ctx, ns, name))
    except NotFound as exc:
        print(f"{prog}: not found: {exc.message}", file=sys.stderr)
        return 1
    except KubeError as exc:
        print(f"{prog}: the Kubernetes API refused: {exc}", file=sys.stderr)
        return 1
    finally:
        gateway.close()
    print(text)
    return 0


def plugin_main() -> int:
    """``kubectl-gpures``: kubectl runs it for ``kubectl gpures <args>``."""
    return main(sys.argv[1:], prog=PLUGIN)

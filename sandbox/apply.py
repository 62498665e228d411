"""Applying a release to the kube emulator through its API, as ``helm`` does.

``install``: the chart's CRDs (existing ones are kept, as Helm never upgrades
``crds/``), then ``pre-install`` hooks, then every manifest in install order, the
release record, then ``post-install`` hooks. ``upgrade``: ``pre-upgrade`` hooks; every
new object created, every changed one brought to the new render, every object of the
previous revision no longer rendered deleted (unless ``helm.sh/resource-policy: keep``);
the record; ``post-upgrade`` hooks. Neither waits for workloads (Helm without
``--wait``, which docs/operator/install.md asks for on a self-signed install): ``wait_available``
is the ``kubectl rollout status`` that follows.

A changed object is written as Helm's three-way merge writes it: fields the new render
sets are set, fields the previous render set and the new one does not are removed,
fields nobody rendered (a ``caBundle`` the certs Job patched in, a Service's
``clusterIP``, an object's status) stay. Lists are replaced whole, as a JSON merge patch
does, except the webhooks of a webhook configuration, matched by name as Kubernetes'
strategic merge does, so a ``caBundle`` survives an upgrade.

Hooks: before creating a hook, one with ``before-hook-creation`` of the same name is
deleted (without it, a hook that exists already fails the release, as Helm's create
does); a Job hook is waited for until Complete (a Failed Job fails the release with
its reason); a Pod hook until Succeeded; others are done once created. When every hook
of an event has succeeded those with ``hook-succeeded`` are deleted; a failed one with
``hook-failed`` is deleted before the error is raised. Deletions propagate in the
background, as Helm's do.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import Callable
from typing import Any

from sandbox import release as rel
from sandbox.release import Hook, Manifest, Record, Rendered
from sandbox.values import Layers
from shared.errors import Conflict, KubeError, NotFound
from shared.gateway import Gateway
from shared.resources import CRDS, NAMESPACES, SECRETS, Resource

Obj = dict[str, Any]
#: How often a wait looks again (seconds).
POLL_S = 0.1


class ReleaseError(RuntimeError):
    """The release failed (a hook failed or timed out, an object was refused)."""


class Kinds:
    """``apiVersion`` + ``kind`` → the resource serving it, from the API's discovery."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self._known: dict[tuple[str, str], Resource] = {}

    async def resource(self, api_version: str, kind: str) -> Resource:
        found = self._known.get((api_version, kind))
        if found is None:
            await self._discover(api_version)
            found = self._known.get((api_version, kind))
        if found is None:
            raise ReleaseError(
                f'resource mapping not found for kind "{kind}" in version "{api_version}": '
                "ensure CRDs are installed first"
            )
        return found

    async def _discover(self, api_version: str) -> None:
        group, _, version = api_version.rpartition("/")
        path = f"/apis/{api_version}" if group else f"/api/{version}"
        with contextlib.suppress(NotFound):
            body = (await self.gateway.request("GET", path)).body
            for item in body.get("resources") or []:
                if "/" in item["name"]:
                    continue  # a subresource
                res = Resource(group, version, item["name"], item["kind"], item["namespaced"])
                self._known[(api_version, item["kind"])] = res


# --- the three-way write ----------------------------------------------------------------


def three_way(previous: Any, wanted: Any, live: Any) -> Any:
    """``live`` with what changed from ``previous`` to ``wanted`` applied, and every
    field ``wanted`` sets set (maps merge, other values are replaced)."""
    if not (isinstance(wanted, dict) and isinstance(live, dict)):
        return copy.deepcopy(wanted)
    before = previous if isinstance(previous, dict) else {}
    out = copy.deepcopy(live)
    for key in before.keys() - wanted.keys():
        out.pop(key, None)
    for key, value in wanted.items():
        out[key] = three_way(before.get(key), value, live.get(key))
    return out


def covers(wanted: Any, live: Any) -> bool:
    """Whether ``live`` holds every field ``wanted`` sets, with the same value."""
    if isinstance(wanted, dict) and isinstance(live, dict):
        return all(covers(value, live.get(key)) for key, value in wanted.items())
    if isinstance(wanted, list) and isinstance(live, list) and len(wanted) == len(live):
        return all(covers(w, x) for w, x in zip(wanted, live, strict=True))
    return bool(wanted == live)


def dropped(previous: Any, wanted: Any, live: Any) -> bool:
    """Whether a field ``previous`` set and ``wanted`` does not is still in ``live``."""
    if not (isinstance(previous, dict) and isinstance(wanted, dict) and isinstance(live, dict)):
        return False
    for key, value in previous.items():
        if key not in wanted and key in live:
            return True
        if key in wanted and dropped(value, wanted[key], live.get(key)):
            return True
    return False


def merged_body(previous: Obj | None, wanted: Obj, live: Obj) -> Obj:
    """The object to PUT: the three-way merge, keeping the live webhooks' caBundles."""
    body: Obj = three_way(previous or {}, wanted, live)
    if wanted.get("kind") in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        bundles = {
            hook.get("name"): (hook.get("clientConfig") or {}).get("caBundle")
            for hook in live.get("webhooks") or []
        }
        for hook in body.get("webhooks") or []:
            config = hook.setdefault("clientConfig", {})
            if "caBundle" not in config and bundles.get(hook.get("name")):
                config["caBundle"] = bundles[hook["name"]]
    body["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
    return body


class Applier:
    """Writes releases into one namespace with an admin gateway."""

    def __init__(
        self,
        gateway: Gateway,
        namespace: str,
        *,
        now: Callable[[], str],
        hook_timeout_s: float = 300.0,
    ) -> None:
        self.gateway = gateway
        self.namespace = namespace
        self.kinds = Kinds(gateway)
        self.now = now
        self.hook_timeout_s = hook_timeout_s

    # --- whole releases ---------------------------------------------------------------

    async def install(self, rendered: Rendered, layers: Layers) -> Record:
        """``helm install --create-namespace`` (without ``--wait``)."""
        with contextlib.suppress(Conflict):
            await self.gateway.create(NAMESPACES, _namespace(self.namespace))
        for crd in rendered.crds:
            with contextlib.suppress(Conflict):
                await self.gateway.create(CRDS, crd)
        await self.run_hooks(rendered, "pre-install")
        for manifest in rendered.manifests:
            await self.put(manifest, None)
        record = Record(1, rel.DEPLOYED, layers, rendered.manifests, rendered.values)
        await self.gateway.create(
            SECRETS, rel.record_secret(record, self.namespace, self.now()), self.namespace
        )
        await self.run_hooks(rendered, "post-install")
        return record

    async def upgrade(self, previous: Record, rendered: Rendered, layers: Layers) -> Record:
        """``helm upgrade``: apply the difference from ``previous`` to ``rendered``."""
        await self.run_hooks(rendered, "pre-upgrade")
        before = {m.key: m for m in previous.manifest}
        now_keys = {m.key for m in rendered.manifests}
        for manifest in rendered.manifests:
            old = before.get(manifest.key)
            await self.put(manifest, None if old is None else old.obj)
        gone = [m for m in previous.manifest if m.key not in now_keys]
        for manifest in sorted(gone, key=lambda m: rel.kind_rank(m.kind), reverse=True):
            if manifest.annotations.get(rel.RESOURCE_POLICY) != "keep":
                await self.delete(manifest)
        record = Record(
            previous.version + 1, rel.DEPLOYED, layers, rendered.manifests, rendered.values
        )
        await self._supersede(previous)
        await self.gateway.create(
            SECRETS, rel.record_secret(record, self.namespace, self.now()), self.namespace
        )
        await self.run_hooks(rendered, "post-upgrade")
        return record

    async def current(self) -> Record | None:
        """The deployed revision recorded in the namespace, if any."""
        listed = await self.gateway.list_all(
            SECRETS, self.namespace, label_selector=f"owner=helm,name={rel.RELEASE_NAME}"
        )
        newest = rel.latest(listed.items)
        return None if newest is None else rel.from_secret(newest)

    async def _supersede(self, previous: Record) -> None:
        name = rel.secret_name(previous.version)
        with contextlib.suppress(NotFound):
            live = await self.gateway.get(SECRETS, name, self.namespace)
            live["metadata"].setdefault("labels", {})["status"] = rel.SUPERSEDED
            await self.gateway.replace(SECRETS, name, live, self.namespace)

    # --- one object -------------------------------------------------------------------

    async def put(self, manifest: Manifest, previous: Obj | None) -> None:
        """Create ``manifest``, or bring the live object to it (three-way)."""
        res = await self.kinds.resource(manifest.obj["apiVersion"], manifest.kind)
        namespace = (manifest.namespace or self.namespace) if res.namespaced else None
        try:
            await self.gateway.create(res, manifest.obj, namespace)
            return
        except Conflict:
            pass
        except KubeError as exc:
            raise ReleaseError(f"{manifest.kind} {manifest.name!r}: {exc}") from exc
        live = await self.gateway.get(res, manifest.name, namespace)
        if covers(manifest.obj, live) and not dropped(previous, manifest.obj, live):
            return
        body = merged_body(previous, manifest.obj, live)
        try:
            await self.gateway.replace(res, manifest.name, body, namespace)
        except KubeError as exc:
            raise ReleaseError(f"{manifest.kind} {manifest.name!r}: {exc}") from exc

    async def delete(self, manifest: Manifest, wait: bool = False) -> None:
        """Delete with background propagation; ``wait``: until it is gone."""
        res = await self.kinds.resource(manifest.obj["apiVersion"], manifest.kind)
        namespace = (manifest.namespace or self.namespace) if res.namespaced else None
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        try:
            await self.gateway.request("DELETE", res.path(namespace, manifest.name), None, body)
        except NotFound:
            return
        while wait:
            try:
                await self.gateway.get(res, manifest.name, namespace)
            except NotFound:
                return
            await asyncio.sleep(POLL_S)

    # --- hooks ------------------------------------------------------------------------

    async def run_hooks(self, rendered: Rendered, event: str) -> None:
        """The hooks of ``event``, as Helm runs them (module docstring)."""
        done: list[Hook] = []
        for hook in rendered.hooks_for(event):
            if rel.BEFORE_HOOK_CREATION in hook.delete_policies:
                await self.delete(hook.manifest, wait=True)
            await self.create_hook(hook.manifest)
            try:
                await self._wait_hook(hook)
            except ReleaseError:
                if rel.HOOK_FAILED in hook.delete_policies:
                    await self.delete(hook.manifest)
                raise
            done.append(hook)
        for hook in done:
            if rel.HOOK_SUCCEEDED in hook.delete_policies:
                await self.delete(hook.manifest)

    async def create_hook(self, manifest: Manifest) -> None:
        """Create a hook object; as with Helm, one that exists already (no
        ``before-hook-creation`` removed it) fails the release."""
        res = await self.kinds.resource(manifest.obj["apiVersion"], manifest.kind)
        namespace = (manifest.namespace or self.namespace) if res.namespaced else None
        try:
            await self.gateway.create(res, manifest.obj, namespace)
        except Conflict:
            raise ReleaseError(f"hook {manifest.kind} {manifest.name!r}: already exists") from None
        except KubeError as exc:
            raise ReleaseError(f"hook {manifest.kind} {manifest.name!r}: {exc}") from exc

    async def _wait_hook(self, hook: Hook) -> None:
        manifest = hook.manifest
        if manifest.kind not in ("Job", "Pod"):
            return
        res = await self.kinds.resource(manifest.obj["apiVersion"], manifest.kind)
        what = f"{manifest.kind} {manifest.name!r}"
        try:
            async with asyncio.timeout(self.hook_timeout_s):
                while True:
                    live = await self.gateway.get(res, manifest.name, self.namespace)
                    verdict = hook_verdict(live)
                    if verdict is True:
                        return
                    if isinstance(verdict, str):
                        raise ReleaseError(f"hook {what} failed: {verdict}")
                    await asyncio.sleep(POLL_S)
        except TimeoutError:
            raise ReleaseError(f"hook {what}: timed out waiting for the condition") from None


def hook_verdict(obj: Obj) -> bool | str:
    """True when a Job/Pod hook succeeded, False while it runs, a reason when it failed."""
    status = obj.get("status") or {}
    if obj.get("kind") == "Pod":
        phase = status.get("phase")
        return True if phase == "Succeeded" else (f"pod {phase}" if phase == "Failed" else False)
    for condition in status.get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return True
        if condition.get("type") == "Failed":
            return str(condition.get("reason") or condition.get("message") or "Failed")
    return False


def _namespace(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


async def wait_available(
    gateway: Gateway, rendered: Rendered, namespace: str, timeout_s: float
) -> None:
    """``kubectl rollout status`` for every Deployment of the release."""
    kinds = Kinds(gateway)
    pending = [m for m in rendered.manifests if m.kind == "Deployment"]
    try:
        async with asyncio.timeout(timeout_s):
            for manifest in pending:
                res = await kinds.resource(manifest.obj["apiVersion"], manifest.kind)
                while True:
                    if rolled_out(await gateway.get(res, manifest.name, namespace)):
                        break
                    await asyncio.sleep(POLL_S)
    except TimeoutError:
        names = ", ".join(m.name for m in pending)
        raise ReleaseError(f"deployments not available in {timeout_s:g}s: {names}") from None


def rolled_out(deployment: Obj) -> bool:
    """The rollout-status rule: observed, every replica updated, all available."""
    spec, status = deployment.get("spec") or {}, deployment.get("status") or {}
    want = int(spec.get("replicas", 1))
    meta = deployment.get("metadata") or {}
    return (
        int(status.get("observedGeneration", 0)) >= int(meta.get("generation", 1))
        and int(status.get("updatedReplicas", 0)) >= want
        and int(status.get("availableReplicas", 0)) >= want
        and int(status.get("replicas", 0)) <= want
    )

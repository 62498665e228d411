"""A release of the chart as Helm makes one: the render, its order, its hooks, its record.

No I/O but the chart read: ``render`` runs Helm's engine (helm-python) on the chart
with the merged values of ``sandbox.values.Layers`` and sorts what comes out the way
``helm install`` applies it (``sandbox.apply`` does the applying):

- ``crds``: the chart's ``crds/`` directory, created first and never upgraded;
- ``manifests``: every rendered object that is not a hook, in Helm's ``InstallOrder``
  by kind (Helm 4's ``kind_sorter.go``; unknown kinds last, alphabetically), objects
  of one kind in template-path order;
- ``hooks``: objects annotated ``helm.sh/hook``, each with its events
  (``pre-install``, ``post-install``, ``pre-upgrade``, ``post-upgrade``, …), weight
  and delete policies (none given: ``before-hook-creation``, as Helm defaults);
  ordered by weight, then kind, then name.

A release is remembered as Helm 3 and 4 remember it: a Secret
``sh.helm.release.v1.<release>.v<revision>`` of type ``helm.sh/release.v1`` in the
release namespace, labelled ``owner=helm``, ``name``, ``status`` and ``version``, whose
``release`` key holds the gzipped JSON of the release (``record``/``from_record``).
Besides Helm's fields (name, namespace, version, info.status, config, manifest, hooks)
it keeps ``sandbox_layers``: the values layers, so ``python -m sandbox upgrade`` can
render again with the running sandbox's layers plus the user's new ones.
"""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

from sandbox.values import Layers, ValuesError
from shared import vocab

Obj = dict[str, Any]

CHART_DIR = Path(__file__).resolve().parents[1] / "charts" / vocab.PRODUCT_NAME
#: The release name the sandbox installs as (object names are the chart defaults).
RELEASE_NAME = vocab.PRODUCT_NAME

#: Helm's ``InstallOrder`` (pkg/release/v1/util/kind_sorter.go).
INSTALL_ORDER: tuple[str, ...] = (
    "PriorityClass",
    "Namespace",
    "NetworkPolicy",
    "ResourceQuota",
    "LimitRange",
    "PodSecurityPolicy",
    "PodDisruptionBudget",
    "ServiceAccount",
    "Secret",
    "SecretList",
    "ConfigMap",
    "StorageClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleList",
    "ClusterRoleBinding",
    "ClusterRoleBindingList",
    "Role",
    "RoleList",
    "RoleBinding",
    "RoleBindingList",
    "Service",
    "DaemonSet",
    "Pod",
    "ReplicationController",
    "ReplicaSet",
    "Deployment",
    "HorizontalPodAutoscaler",
    "StatefulSet",
    "Job",
    "CronJob",
    "IngressClass",
    "Ingress",
    "APIService",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
)
_RANK = {kind: i for i, kind in enumerate(INSTALL_ORDER)}

HOOK = "helm.sh/hook"
HOOK_WEIGHT = "helm.sh/hook-weight"
HOOK_DELETE_POLICY = "helm.sh/hook-delete-policy"
BEFORE_HOOK_CREATION = "before-hook-creation"
HOOK_SUCCEEDED = "hook-succeeded"
HOOK_FAILED = "hook-failed"
#: ``helm.sh/resource-policy: keep``: an object an upgrade or uninstall never deletes.
RESOURCE_POLICY = "helm.sh/resource-policy"

RELEASE_SECRET_TYPE = "helm.sh/release.v1"
DEPLOYED, SUPERSEDED, FAILED = "deployed", "superseded", "failed"


class RenderError(ValueError):
    """The chart refused these values; the message is Helm's."""


def kind_rank(kind: str) -> tuple[int, str]:
    """Sort key of a kind in Helm's install order (unknown kinds last, by name)."""
    return (_RANK[kind], "") if kind in _RANK else (len(_RANK), kind)


@dataclass(frozen=True)
class Manifest:
    """One rendered object and the template it came from."""

    path: str
    obj: Obj

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind", ""))

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def namespace(self) -> str | None:
        value = self.obj["metadata"].get("namespace")
        return None if value is None else str(value)

    @property
    def key(self) -> tuple[str, str, str, str]:
        """Identity across revisions: apiVersion's group, kind, namespace, name."""
        group = str(self.obj.get("apiVersion", "")).rpartition("/")[0]
        return (group, self.kind, self.namespace or "", self.name)

    @property
    def annotations(self) -> dict[str, str]:
        return dict(self.obj["metadata"].get("annotations") or {})


@dataclass(frozen=True)
class Hook:
    """A hook object, when it runs and what becomes of it."""

    manifest: Manifest
    events: frozenset[str]
    weight: int
    delete_policies: frozenset[str]


def hook_of(manifest: Manifest) -> Hook | None:
    """The hook ``manifest`` is, or None for an ordinary object."""
    notes = manifest.annotations
    if HOOK not in notes:
        return None
    events = frozenset(e.strip() for e in notes[HOOK].split(",") if e.strip())
    try:
        weight = int(notes.get(HOOK_WEIGHT, "0"))
    except ValueError:
        weight = 0  # Helm reads a weight that is not a number as 0
    policies = frozenset(
        p.strip() for p in notes.get(HOOK_DELETE_POLICY, "").split(",") if p.strip()
    )
    return Hook(manifest, events, weight, policies or frozenset({BEFORE_HOOK_CREATION}))


@dataclass(frozen=True)
class Rendered:
    """What one render of the chart gives, sorted for applying."""

    crds: list[Obj]
    manifests: list[Manifest]
    hooks: list[Hook]
    #: The values given (Helm's ``config``), and merged with the chart's defaults.
    values: Obj
    notes: str = ""
    effective: Obj = field(default_factory=dict)

    def hooks_for(self, event: str) -> list[Hook]:
        """The hooks of ``event`` in the order Helm runs them."""
        return [h for h in self.hooks if event in h.events]


def manifest_text(manifests: Iterable[Manifest]) -> str:
    """A manifest as Helm stores it: each object under a ``# Source:`` line."""
    return "".join(
        f"---\n# Source: {m.path}\n{yaml.safe_dump(m.obj, sort_keys=False)}" for m in manifests
    )


def render(
    layers: Layers, namespace: str, *, revision: int = 1, chart_dir: Path = CHART_DIR
) -> Rendered:
    """Render the chart with ``layers`` as an install (revision 1) or an upgrade."""
    try:
        values = layers.merged()
    except ValuesError as exc:
        raise RenderError(str(exc)) from None
    upgrade = revision > 1
    with helm.Chart.load(chart_dir) as chart:
        try:
            chart.validate_schema(values)
            texts = chart.render(
                values,
                name=RELEASE_NAME,
                namespace=namespace,
                revision=revision,
                is_install=not upgrade,
                is_upgrade=upgrade,
            )
        except helm.HelmError as exc:
            raise RenderError(str(exc)) from None
        crds = [yaml.safe_load(item["data"]) for item in chart.crds]
        effective = chart.merge_values(values)
    return replace(sort(texts, crds, values), effective=effective)


def sort(texts: Mapping[str, str], crds: list[Obj], values: Obj) -> Rendered:
    """Split rendered templates into ordered manifests and hooks."""
    every: list[Manifest] = []
    notes = ""
    for path in sorted(texts):
        if path.endswith("NOTES.txt"):
            notes = texts[path]
        if not path.endswith((".yaml", ".yml")):
            continue
        every.extend(Manifest(path, d) for d in yaml.safe_load_all(texts[path]) if d)
    plain = [m for m in every if hook_of(m) is None]
    plain.sort(key=lambda m: kind_rank(m.kind))  # stable: template order within a kind
    hooks = [h for h in map(hook_of, every) if h is not None]
    hooks.sort(key=lambda h: (h.weight, kind_rank(h.manifest.kind), h.manifest.name))
    return Rendered(crds, plain, hooks, values, notes)


# --- the record -----------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """A stored revision of the release."""

    version: int
    status: str
    layers: Layers
    manifest: list[Manifest] = field(default_factory=list)
    values: Obj = field(default_factory=dict)


def secret_name(version: int, release: str = RELEASE_NAME) -> str:
    return f"sh.helm.release.v1.{release}.v{version}"


def record_secret(record: Record, namespace: str, now: str, release: str = RELEASE_NAME) -> Obj:
    """The Secret that remembers ``record`` (Helm's storage driver format)."""
    body = {
        "name": release,
        "namespace": namespace,
        "version": record.version,
        "info": {"status": record.status, "last_deployed": now},
        "config": record.values,
        "manifest": manifest_text(record.manifest),
        "sandbox_layers": record.layers.to_json(),
    }
    packed = base64.b64encode(gzip.compress(json.dumps(body).encode())).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": RELEASE_SECRET_TYPE,
        "metadata": {
            "name": secret_name(record.version, release),
            "namespace": namespace,
            "labels": {
                "name": release,
                "owner": "helm",
                "status": record.status,
                "version": str(record.version),
            },
        },
        "data": {"release": base64.b64encode(packed.encode()).decode()},
    }


def from_secret(secret: Obj) -> Record:
    """The record a release Secret holds (``ValueError`` if it holds none)."""
    try:
        packed = base64.b64decode(secret["data"]["release"])
        body = json.loads(gzip.decompress(base64.b64decode(packed)))
    except (KeyError, ValueError, OSError) as exc:
        raise ValueError(f"not a release record: {exc}") from None
    manifest = [
        Manifest(_source(doc_text), doc)
        for doc_text in body.get("manifest", "").split("---\n")
        if (doc := yaml.safe_load(doc_text))
    ]
    return Record(
        int(body["version"]),
        str(body["info"]["status"]),
        Layers.from_json(body.get("sandbox_layers") or {}),
        manifest,
        dict(body.get("config") or {}),
    )


def _source(text: str) -> str:
    first = text.splitlines()[0] if text else ""
    return first.removeprefix("# Source: ") if first.startswith("# Source: ") else ""


def latest(secrets: Iterable[Obj]) -> Obj | None:
    """The newest release Secret of ``secrets`` (labelled ``owner=helm``)."""
    mine = [s for s in secrets if (s["metadata"].get("labels") or {}).get("owner") == "helm"]
    return max(mine, key=lambda s: int(s["metadata"]["labels"]["version"]), default=None)

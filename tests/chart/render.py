"""Rendering the chart with Helm's own engine, and the checks every rendering passes.

``render`` runs libhelm (``helm-python-sdk``) exactly as ``helm template`` would and
returns the manifests as objects, hooks included. ``problems`` is the whole gate a
chart must pass — values schema, strict ``helm lint`` for the oldest and newest
Kubernetes versions we support, YAML that parses, and every built-in object valid
against that version's JSON schema in strict mode (unknown fields are errors) — as a
list of messages, so a test can show both that the real chart passes and that a
broken copy does not.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate  # type: ignore[import-untyped]
import yaml

from shared import vocab

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / vocab.PRODUCT_NAME
RELEASE = vocab.PRODUCT_NAME
NAMESPACE = "gpu-system"

#: The Kubernetes versions we support at both ends (docs/operator/install.md says the same):
#: the oldest with matchConditions and scheduling gates on by default, and the newest
#: kubernetes-validate ships schemas for.
OLDEST_KUBERNETES = "1.28"
NEWEST_KUBERNETES = kubernetes_validate.utils.latest_version()
KUBERNETES_VERSIONS = (OLDEST_KUBERNETES, NEWEST_KUBERNETES)

#: API groups of custom kinds the chart renders optionally (no built-in schema).
CUSTOM_GROUPS = frozenset({"cert-manager.io", "monitoring.coreos.com"})

#: The one value every install must set.
REQUIRED: dict[str, Any] = {"reservationApi": {"url": "https://reservations.example.edu"}}

Obj = dict[str, Any]


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Deep merge of two values trees (``extra`` wins)."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def values(**overrides: Any) -> dict[str, Any]:
    """Install values: the required ones plus ``overrides`` (top-level keys)."""
    return merge(REQUIRED, overrides)


def render_manifests(
    chart: Path, vals: dict[str, Any], namespace: str = NAMESPACE, release: str = RELEASE
) -> dict[str, str]:
    """Template path → rendered text, as ``helm template`` renders an install."""
    with helm.Chart.load(chart) as loaded:
        loaded.validate_schema(vals)
        return loaded.render(vals, name=release, namespace=namespace, is_install=True)


def documents(manifests: dict[str, str]) -> list[Obj]:
    """Every non-empty YAML document of the rendered templates (NOTES.txt excluded)."""
    docs: list[Obj] = []
    for path, text in sorted(manifests.items()):
        if not path.endswith((".yaml", ".yml")):
            continue
        for doc in yaml.safe_load_all(text):
            if doc is None:
                continue
            if not isinstance(doc, dict):
                raise ValueError(f"{path}: a document is not a mapping: {doc!r}")
            docs.append(doc)
    return docs


def crds(chart: Path = CHART) -> list[Obj]:
    """The CustomResourceDefinitions under ``crds/``, as Helm installs them."""
    with helm.Chart.load(chart) as loaded:
        return [yaml.safe_load(c["data"]) for c in loaded.crds]


def _frozen(vals: dict[str, Any]) -> str:
    return json.dumps(vals, sort_keys=True)


@cache
def _render_cached(chart: str, frozen: str, namespace: str) -> tuple[dict[str, str], str]:
    manifests = render_manifests(Path(chart), json.loads(frozen), namespace)
    return manifests, json.dumps(documents(manifests))


def render(vals: dict[str, Any], namespace: str = NAMESPACE, chart: Path = CHART) -> list[Obj]:
    """The objects an install with ``vals`` creates (rendered once per values set)."""
    docs: list[Obj] = json.loads(_render_cached(str(chart), _frozen(vals), namespace)[1])
    return docs


def notes(vals: dict[str, Any], namespace: str = NAMESPACE) -> str:
    """The rendered NOTES.txt."""
    manifests = _render_cached(str(CHART), _frozen(vals), namespace)[0]
    return next(text for path, text in manifests.items() if path.endswith("NOTES.txt"))


def validate(obj: Obj, version: str) -> list[str]:
    """Strict schema problems of one built-in object for Kubernetes ``version``."""
    name = f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}"
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.utils.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path)
        return [f"{name} (Kubernetes {version}) at {path}: {exc.message}"]
    except kubernetes_validate.utils.SchemaNotFoundError as exc:
        return [f"{name}: {exc.message}"]
    return []


def is_custom(obj: Obj) -> bool:
    """Objects of optional third-party kinds (cert-manager, prometheus-operator)."""
    return str(obj.get("apiVersion", "")).split("/")[0] in CUSTOM_GROUPS


def lint(chart: Path, vals: dict[str, Any], version: str, namespace: str = NAMESPACE) -> list[str]:
    """``helm lint --strict`` findings of severity warning or worse."""
    report = helm.lint(chart, vals, strict=True, namespace=namespace, kube_version=f"v{version}.0")
    found = [f"lint {m['path']}: {m['error']}" for m in report["messages"] if m["severity"] >= 2]
    return found + [f"lint: {e}" for e in report.get("errors") or []]


def problems(
    chart: Path,
    value_sets: Iterable[dict[str, Any]],
    namespace: str = NAMESPACE,
    with_crds: bool = False,
) -> list[str]:
    """Everything wrong with ``chart`` under each values set; empty when it is sound.

    ``with_crds`` also validates the files under ``crds/`` (they are not templates).
    """
    found: list[str] = []
    for vals in value_sets:
        try:
            docs = documents(render_manifests(chart, vals, namespace))
        except (helm.HelmError, yaml.YAMLError, ValueError) as exc:
            found.append(f"render: {type(exc).__name__}: {exc}")
            continue
        for version in KUBERNETES_VERSIONS:
            found += lint(chart, vals, version, namespace)
            for obj in [*docs, *(crds(chart) if with_crds else [])]:
                if not is_custom(obj):
                    found += validate(obj, version)
    return found

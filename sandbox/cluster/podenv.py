"""A container's environment as the kubelet builds it from the pod spec. No side effects.

``envFrom`` first (in order, a ``prefix`` prepended), then ``env`` (a later name wins);
``$(NAME)`` in a value expands to an earlier variable (``$$`` is a literal ``$``, an
unknown name stays as written), as the kubelet's expansion does. ``valueFrom``:
``secretKeyRef``, ``configMapKeyRef`` and ``fieldRef`` (the downward API's fields);
``resourceFieldRef`` is refused. A missing Secret, ConfigMap or key without
``optional: true`` is a ``ConfigError`` with the kubelet's message: the container does
not start (``CreateContainerConfigError``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Obj = dict[str, Any]
#: ``(kind, name)`` → the object's decoded data in the pod's namespace, or None if absent.
Lookup = Callable[[str, str], Mapping[str, str] | None]

SECRET = "Secret"
CONFIG_MAP = "ConfigMap"
_EXPANSION = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.\-]*)\)")
_FIELD = re.compile(r"metadata\.(labels|annotations)\['([^']*)'\]")


class ConfigError(Exception):
    """The container cannot be configured (its waiting message)."""


def expand(value: str, env: Mapping[str, str]) -> str:
    """``$(NAME)`` → ``env[NAME]`` when defined; ``$$`` → ``$``."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "$"
        return env.get(name, match.group(0))

    return _EXPANSION.sub(one, value)


def field_value(pod: Obj, path: str, pod_ip: str, host_ip: str) -> str:
    """The downward API's ``fieldRef.fieldPath`` of ``pod``."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
    }
    if path in simple:
        return str(simple[path] or "")
    match = _FIELD.fullmatch(path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise ConfigError(f'unsupported fieldPath: "{path}"')


def _kind_of(ref_kind: str) -> str:
    return SECRET if ref_kind.startswith("secret") else CONFIG_MAP


def _not_found(kind: str, name: str) -> ConfigError:
    return ConfigError(f'{kind.lower()} "{name}" not found')


def key_ref(ref_kind: str, ref: Any, namespace: str, lookup: Lookup) -> str | None:
    """A ``secretKeyRef``/``configMapKeyRef`` value; None when optional and missing."""
    kind = _kind_of(ref_kind)
    if not isinstance(ref, dict) or not ref.get("name") or not ref.get("key"):
        raise ConfigError(f"{ref_kind} needs a name and a key")
    name, key, optional = str(ref["name"]), str(ref["key"]), bool(ref.get("optional"))
    data = lookup(kind, name)
    if data is None:
        if optional:
            return None
        raise _not_found(kind, name)
    if key not in data:
        if optional:
            return None
        raise ConfigError(f"couldn't find key {key} in {kind} {namespace}/{name}")
    return data[key]


def _value_from(
    source: Any, pod: Obj, pod_ip: str, host_ip: str, lookup: Lookup, env: Mapping[str, str]
) -> str | None:
    if not isinstance(source, dict) or len(source) != 1:
        raise ConfigError("valueFrom must name exactly one source")
    (kind, ref), namespace = next(iter(source.items())), str(pod["metadata"].get("namespace"))
    if kind in ("secretKeyRef", "configMapKeyRef"):
        return key_ref(kind, ref, namespace, lookup)
    if kind == "fieldRef" and isinstance(ref, dict):
        return field_value(pod, str(ref.get("fieldPath") or ""), pod_ip, host_ip)
    if kind == "resourceFieldRef":
        raise ConfigError("resourceFieldRef is not supported by the sandbox kubelet")
    raise ConfigError(f"unknown valueFrom source {kind!r}")


def _env_from(container: Obj, lookup: Lookup) -> dict[str, str]:
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = str(source.get("prefix") or "")
        for kind_key, kind in (("secretRef", SECRET), ("configMapRef", CONFIG_MAP)):
            ref = source.get(kind_key)
            if not isinstance(ref, dict):
                continue
            data = lookup(kind, str(ref.get("name") or ""))
            if data is None and not ref.get("optional"):
                raise _not_found(kind, str(ref.get("name") or ""))
            env.update({prefix + k: v for k, v in (data or {}).items()})
    return env


def container_env(
    pod: Obj, container: Obj, pod_ip: str, host_ip: str, lookup: Lookup
) -> dict[str, str]:
    """The variables the spec gives ``container`` (``ConfigError`` if it cannot start)."""
    env = _env_from(container, lookup)
    for var in container.get("env") or []:
        if not isinstance(var, dict) or not var.get("name"):
            raise ConfigError("an env entry has no name")
        name = str(var["name"])
        if "valueFrom" in var:
            value = _value_from(var["valueFrom"], pod, pod_ip, host_ip, lookup, env)
            if value is not None:
                env[name] = value
        else:
            env[name] = expand(str(var.get("value") or ""), env)
    return env

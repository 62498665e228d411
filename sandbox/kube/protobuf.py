"""Decoding the protobuf bodies kubectl's typed clients send (``kubectl create namespace``).

kubectl sends ``application/vnd.kubernetes.protobuf`` for creates made through its
typed clientset: the ``k8s\\0`` magic, a ``runtime.Unknown`` envelope (type meta and
raw bytes), and the object's protobuf. This reader knows the wire format and the field
numbers of the few kinds kubectl creates that way (Namespace, ConfigMap, Secret,
ServiceAccount, and the self reviews of ``kubectl auth``); any other kind is a 415, as
for any unaccepted media type.
"""

from __future__ import annotations

import base64
from typing import Any

from sandbox.kube.errors import ApiError, bad_request, unsupported_media

Obj = dict[str, Any]
MAGIC = b"k8s\x00"
PROTOBUF = "application/vnd.kubernetes.protobuf"

# Field schemas: number → (name, kind); kinds: str, int, bool, bytes, a nested schema
# name, "map:<value kind>" or "list:<kind>".
SCHEMAS: dict[str, dict[int, tuple[str, str]]] = {
    "Unknown": {
        1: ("typeMeta", "TypeMeta"),
        2: ("raw", "bytes"),
        3: ("contentEncoding", "str"),
        4: ("contentType", "str"),
    },
    "TypeMeta": {1: ("apiVersion", "str"), 2: ("kind", "str")},
    "ObjectMeta": {
        1: ("name", "str"),
        2: ("generateName", "str"),
        3: ("namespace", "str"),
        11: ("labels", "map:str"),
        12: ("annotations", "map:str"),
        14: ("finalizers", "list:str"),
    },
    "Namespace": {1: ("metadata", "ObjectMeta"), 2: ("spec", "NamespaceSpec")},
    "NamespaceSpec": {1: ("finalizers", "list:str")},
    "ConfigMap": {
        1: ("metadata", "ObjectMeta"),
        2: ("data", "map:str"),
        3: ("binaryData", "map:bytes"),
        4: ("immutable", "bool"),
    },
    "Secret": {
        1: ("metadata", "ObjectMeta"),
        2: ("data", "map:bytes"),
        3: ("type", "str"),
        4: ("stringData", "map:str"),
        5: ("immutable", "bool"),
    },
    "ServiceAccount": {1: ("metadata", "ObjectMeta"), 4: ("automountServiceAccountToken", "bool")},
    # kubectl auth can-i / can-i --list / whoami (sandbox.kube.selfreviews)
    "SelfSubjectAccessReview": {1: ("metadata", "ObjectMeta"), 2: ("spec", "AccessSpec")},
    "AccessSpec": {
        1: ("resourceAttributes", "ResourceAttributes"),
        2: ("nonResourceAttributes", "NonResourceAttributes"),
    },
    "ResourceAttributes": {
        1: ("namespace", "str"),
        2: ("verb", "str"),
        3: ("group", "str"),
        4: ("version", "str"),
        5: ("resource", "str"),
        6: ("subresource", "str"),
        7: ("name", "str"),
    },
    "NonResourceAttributes": {1: ("path", "str"), 2: ("verb", "str")},
    "SelfSubjectRulesReview": {1: ("metadata", "ObjectMeta"), 2: ("spec", "RulesSpec")},
    "RulesSpec": {1: ("namespace", "str")},
    "SelfSubjectReview": {1: ("metadata", "ObjectMeta")},
}


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise bad_request("truncated protobuf")
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            out.append((number, value))
        elif wire == 2:
            length, pos = _varint(data, pos)
            out.append((number, data[pos : pos + length]))
            pos += length
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise bad_request("unsupported protobuf wire type")
    return out


def _scalar(kind: str, value: int | bytes) -> Any:
    if kind == "str":
        return value.decode() if isinstance(value, bytes) else str(value)
    if kind == "bytes":
        return base64.b64encode(value).decode() if isinstance(value, bytes) else ""
    if kind == "bool":
        return bool(value)
    if kind == "int":
        return int(value) if isinstance(value, int) else 0
    return decode_message(value if isinstance(value, bytes) else b"", kind)


def decode_message(data: bytes, schema: str) -> Obj:
    """Decode ``data`` as message ``schema`` (unknown fields are skipped)."""
    fields = SCHEMAS[schema]
    out: Obj = {}
    for number, value in _fields(data):
        if number not in fields:
            continue
        name, kind = fields[number]
        if kind.startswith("map:"):
            entry = dict(_fields(value)) if isinstance(value, bytes) else {}
            key = _scalar("str", entry.get(1, b""))
            out.setdefault(name, {})[key] = _scalar(kind[4:], entry.get(2, b""))
        elif kind.startswith("list:"):
            out.setdefault(name, []).append(_scalar(kind[5:], value))
        else:
            out[name] = _scalar(kind, value)
    return out


def decode(body: bytes) -> Obj:
    """A kubectl protobuf body as a JSON-shaped object; 415 for kinds we do not know."""
    if not body.startswith(MAGIC):
        raise bad_request("protobuf body without the k8s magic prefix")
    envelope = decode_message(body[len(MAGIC) :], "Unknown")
    type_meta = envelope.get("typeMeta") or {}
    kind = type_meta.get("kind", "")
    if kind not in SCHEMAS or kind in _PARTS:
        raise _unsupported()
    raw = base64.b64decode(envelope.get("raw", ""))
    obj = decode_message(raw, kind)
    obj["apiVersion"], obj["kind"] = type_meta.get("apiVersion", "v1"), kind
    return obj


#: Schemas of message parts, not of kinds a body may be.
_PARTS = frozenset(
    {"Unknown", "TypeMeta", "ObjectMeta", "NamespaceSpec", "AccessSpec", "RulesSpec"}
    | {"ResourceAttributes", "NonResourceAttributes"}
)


def _unsupported() -> ApiError:
    return unsupported_media(["application/json", "application/yaml"])

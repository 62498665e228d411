"""Structural OpenAPI v3 schemas of CRDs: pruning, defaulting and validation (facts §8).

``prune`` drops fields the schema does not declare (unless
``x-kubernetes-preserve-unknown-fields``) and reports their paths; ``default`` fills
``default`` values; ``validate`` checks types, enums, bounds, lengths, patterns and
``required`` and returns one cause per violation.

Array items that are flat objects (every value a scalar) are remembered per item schema
once found clean (nothing to prune) or valid (no violation): a ledger write sends back
every hold it did not change, and both answers are a pure function of the item's values
and the schema, so a remembered item gets exactly the answer checking it again would
give (``_Known``). Anything else is checked in full every time.
"""

from __future__ import annotations

import re
from typing import Any

from sandbox.kube.errors import FieldError, invalid_value, not_supported, required

Obj = dict[str, Any]
Schema = dict[str, Any]

PRESERVE = "x-kubernetes-preserve-unknown-fields"
INT_OR_STRING = "x-kubernetes-int-or-string"
EMBEDDED = "x-kubernetes-embedded-resource"
_ROOT_KEEP = ("apiVersion", "kind", "metadata")
_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


#: Items remembered per item schema before that memo is emptied (never grown past it).
KNOWN_ITEMS = 4096
Flat = tuple[tuple[tuple[str, Any], ...], tuple[type, ...]]
_SCALARS = frozenset({str, int, float, bool, type(None)})


def flat_key(item: Any) -> Flat | None:
    """A hashable key standing for a flat object's exact values; ``None`` otherwise.

    The value types are part of the key: ``1``, ``1.0`` and ``True`` are equal and hash
    alike in Python but not in a schema (integer, number, boolean).
    """
    if type(item) is not dict:
        return None
    values = tuple(item.items())
    types = tuple(map(type, item.values()))
    return (values, types) if _SCALARS.issuperset(types) else None


class _Known:
    """Flat items found clean/valid, by item schema (schemas are parsed once per CRD
    version and never mutated, so an answer stays true for the schema it was found on)."""

    def __init__(self) -> None:
        self._sets: dict[int, tuple[Schema, set[Flat]]] = {}

    def of(self, schema: Schema) -> set[Flat]:
        found = self._sets.get(id(schema))
        if found is None or found[0] is not schema:
            found = self._sets[id(schema)] = (schema, set())
        if len(found[1]) >= KNOWN_ITEMS:
            found[1].clear()
        return found[1]


class _Held:
    """Flat items found clean/valid, by item schema and by identity, each held so its
    ``id`` is not reused while remembered. Only for objects never changed after they
    were judged: pruning's own copies and what is validated as it will be stored —
    stored objects are never changed in place (``store.put_owned``), and a sharing JSON
    Patch (``patch.json_patch``) copies every container it changes."""

    def __init__(self) -> None:
        self._held: dict[int, tuple[Schema, dict[int, Any]]] = {}

    def of(self, schema: Schema) -> dict[int, Any]:
        found = self._held.get(id(schema))
        if found is None or found[0] is not schema:
            found = self._held[id(schema)] = (schema, {})
        if len(found[1]) >= KNOWN_ITEMS:
            found[1].clear()
        return found[1]


_CLEAN = _Known()
_VALID = _Known()
_CLEAN_HELD = _Held()
_VALID_HELD = _Held()


def _declared_scalars(value: Any, props: Any) -> bool:
    """A dict whose every key is a declared property and every value a scalar: pruning
    it keeps all of it (a scalar has nothing to prune), so it is copied as it is."""
    return (
        type(value) is dict
        and type(props) is dict
        and props.keys() >= value.keys()
        and _SCALARS.issuperset(map(type, value.values()))
    )


def prune(value: Any, schema: Schema, path: str = "", root: bool = True) -> tuple[Any, list[str]]:
    """``value`` without undeclared fields, and the dropped paths."""
    dropped: list[str] = []
    if isinstance(value, dict):
        props = schema.get("properties")
        if _declared_scalars(value, props):
            return dict(value), dropped
        extra = schema.get("additionalProperties")
        keep_unknown = bool(schema.get(PRESERVE))
        out: Obj = {}
        keep_root = root or schema.get(EMBEDDED)
        for key, item in value.items():
            if keep_root and key in _ROOT_KEEP:
                out[key] = item
            elif props is not None and key in props:
                if isinstance(item, dict | list):  # a scalar has nothing to prune
                    out[key], more = prune(item, props[key], _join(path, key), False)
                    dropped += more
                else:
                    out[key] = item
            elif isinstance(extra, dict):
                out[key], more = prune(item, extra, _join(path, key), False)
                dropped += more
            elif keep_unknown or extra is True or schema.get(INT_OR_STRING):
                out[key] = item
            else:
                dropped.append(_join(path, key))
        return out, dropped
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        items = schema["items"]
        clean = _CLEAN.of(items)
        # with defaults below, ``default`` writes into what pruning gives: copies only
        held = None if _has_default(items) else _CLEAN_HELD.of(items)
        pruned = []
        props = items.get("properties")
        for i, item in enumerate(value):
            if held is not None and held.get(id(item)) is item:
                pruned.append(item)  # pruning's own clean copy, unchanged since: itself
                continue
            if _declared_scalars(item, props):
                new = dict(item)
            else:
                key = flat_key(item)
                if key is not None and key in clean:
                    new = dict(item)  # a copy, as pruning it again would give
                else:
                    new, more = prune(item, items, f"{path}[{i}]", False)
                    dropped += more
                    if key is None or more:
                        pruned.append(new)
                        continue
                    clean.add(key)
            pruned.append(new)
            if held is not None:
                held[id(new)] = new
        return pruned, dropped
    return value, dropped


def default(value: Any, schema: Schema) -> Any:
    """Fill ``default`` values of absent properties, recursively."""
    if not _has_default(schema):
        return value
    if isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key not in value and "default" in sub:
                value[key] = sub["default"]
            if key in value:
                value[key] = default(value[key], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in value:
                value[key] = default(value[key], extra)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [default(item, schema["items"]) for item in value]
    return value


#: Whether a schema (by identity) declares a ``default`` anywhere below it. Schemas are
#: parsed once per CRD version and never mutated, so the answer never changes.
_DEFAULTS: dict[int, tuple[Schema, bool]] = {}


def _has_default(schema: Schema) -> bool:
    known = _DEFAULTS.get(id(schema))
    if known is not None and known[0] is schema:
        return known[1]
    subs = [*(schema.get("properties") or {}).values()]
    subs += [
        s for s in (schema.get("additionalProperties"), schema.get("items")) if isinstance(s, dict)
    ]
    found = "default" in schema or any(_has_default(sub) for sub in subs)
    _DEFAULTS[id(schema)] = (schema, found)
    return found


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _type_ok(value: Any, expected: str, schema: Schema) -> bool:
    actual = _type_name(value)
    if schema.get(INT_OR_STRING):
        return actual in ("integer", "string")
    if actual == "null":
        return bool(schema.get("nullable")) or not expected
    if expected == "number":
        return actual in ("integer", "number")
    if expected == "integer" and isinstance(value, float):
        return value.is_integer()
    return not expected or actual == expected


def validate(value: Any, schema: Schema, path: str = "") -> list[FieldError]:
    """Every schema violation in ``value``."""
    expected = schema.get("type", "")
    if not _type_ok(value, expected, schema):
        actual = _type_name(value)
        return [
            invalid_value(path, actual, f'{path} in body must be of type {expected}: "{actual}"')
        ]
    if value is None:
        return []
    errors = _scalar_rules(value, schema, path)
    if isinstance(value, dict):
        errors += _object_rules(value, schema, path)
    elif isinstance(value, list):
        errors += _array_rules(value, schema, path)
    return errors


def _scalar_rules(value: Any, schema: Schema, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(not_supported(path, value, [str(v) for v in schema["enum"]]))
    if isinstance(value, int | float) and not isinstance(value, bool):
        errors += _bounds(value, schema, path)
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append(
                invalid_value(
                    path,
                    value,
                    f"{path} in body should be at least {schema['minLength']} chars long",
                )
            )
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(
                invalid_value(
                    path, value, f"{path} in body may not be longer than {schema['maxLength']}"
                )
            )
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(
                invalid_value(path, value, f"{path} in body should match '{schema['pattern']}'")
            )
        if schema.get("format") == "date-time" and not _DATE_TIME.match(value):
            errors.append(
                invalid_value(path, value, f'{path} in body must be of type date-time: "{value}"')
            )
    return errors


def _bounds(value: float, schema: Schema, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    if "minimum" in schema:
        low, exclusive = schema["minimum"], schema.get("exclusiveMinimum", False)
        if value < low or (exclusive and value == low):
            word = "greater than" if exclusive else "greater than or equal to"
            errors.append(invalid_value(path, value, f"{path} in body should be {word} {low}"))
    if "maximum" in schema:
        high, exclusive = schema["maximum"], schema.get("exclusiveMaximum", False)
        if value > high or (exclusive and value == high):
            word = "less than" if exclusive else "less than or equal to"
            errors.append(invalid_value(path, value, f"{path} in body should be {word} {high}"))
    return errors


def _object_rules(value: Obj, schema: Schema, path: str) -> list[FieldError]:
    errors = [
        required(_join(path, key)) for key in schema.get("required") or [] if key not in value
    ]
    props = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    for key, item in value.items():
        if key in props:
            errors += validate(item, props[key], _join(path, key))
        elif isinstance(extra, dict):
            errors += validate(item, extra, _join(path, key))
    if "minProperties" in schema and len(value) < schema["minProperties"]:
        errors.append(
            invalid_value(
                path,
                len(value),
                f"{path} in body should have at least {schema['minProperties']} properties",
            )
        )
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        errors.append(
            invalid_value(
                path,
                len(value),
                f"{path} in body should have at most {schema['maxProperties']} properties",
            )
        )
    return errors


def _array_rules(value: list[Any], schema: Schema, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    if "minItems" in schema and len(value) < schema["minItems"]:
        errors.append(
            invalid_value(
                path, len(value), f"{path} in body should have at least {schema['minItems']} items"
            )
        )
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(
            invalid_value(
                path, len(value), f"{path} in body should have at most {schema['maxItems']} items"
            )
        )
    items = schema.get("items")
    if isinstance(items, dict):
        valid = _VALID.of(items)
        held = _VALID_HELD.of(items)
        plain = plain_check(items)
        for i, item in enumerate(value):
            if held.get(id(item)) is item:
                continue
            key = flat_key(item)
            if key is not None and key in valid:
                held[id(item)] = item
                continue
            found = (
                [] if plain is not None and plain(item) else validate(item, items, f"{path}[{i}]")
            )
            errors += found
            if key is not None and not found:
                valid.add(key)
                held[id(item)] = item
    return errors


#: What ``plain_check`` understands: an object schema's keywords, a member's, and the
#: member types (Python types of a decoded JSON value that are valid as that type).
_PLAIN_OBJECT = frozenset({"type", "description", "required", "properties"})
_PLAIN_MEMBER = frozenset({"type", "description", "minimum", "maximum"})
_PLAIN_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "boolean": (bool,),
    "number": (int, float),
}
_PLAIN: dict[int, tuple[Schema, Any]] = {}


def plain_check(schema: Schema) -> Any:
    """For an object schema of plain members (each a string, integer, boolean or number,
    bounded at most by ``minimum``/``maximum``; ``required``; no other keyword), a quick
    test that is True only for a value ``validate`` finds no fault in — the members
    present of exactly their type and within bounds, every required one present (an
    undeclared member is not validated either). False means: ask ``validate`` (for the
    faults and their messages). None for any other schema. Kept per schema identity."""
    known = _PLAIN.get(id(schema))
    if known is not None and known[0] is schema:
        return known[1]
    check = _plain_check(schema)
    _PLAIN[id(schema)] = (schema, check)
    return check


def _plain_check(schema: Schema) -> Any:
    if schema.get("type") != "object" or not _PLAIN_OBJECT.issuperset(schema):
        return None
    rules: dict[str, tuple[tuple[type, ...], Any, Any]] = {}
    for key, member in (schema.get("properties") or {}).items():
        if not isinstance(member, dict) or not _PLAIN_MEMBER.issuperset(member):
            return None
        kind = member.get("type")
        if kind not in _PLAIN_TYPES:
            return None
        low, high = member.get("minimum"), member.get("maximum")
        numeric = kind in ("integer", "number")
        if (low is not None or high is not None) and not numeric:
            return None
        for bound in (low, high):
            if bound is not None and type(bound) not in (int, float):
                return None
        rules[key] = (_PLAIN_TYPES[kind], low, high)
    required = tuple(schema.get("required") or ())

    def check(value: Any) -> bool:
        if type(value) is not dict or any(key not in value for key in required):
            return False
        for key, member in value.items():
            rule = rules.get(key)
            if rule is None:
                continue
            types, low, high = rule
            if type(member) not in types:
                return False
            if (low is not None and member < low) or (high is not None and member > high):
                return False
        return True

    return check


def structural_problems(schema: Any, path: str = "openAPIV3Schema") -> list[str]:
    """Where ``schema`` is not structural: a node without ``type`` (facts §8)."""
    if not isinstance(schema, dict):
        return [f"{path}: must be an object"]
    problems = []
    if not schema.get("type") and not schema.get(PRESERVE) and not schema.get(INT_OR_STRING):
        problems.append(
            f"{path}.type: Required value: must not be empty for specified object fields"
        )
    for key, sub in (schema.get("properties") or {}).items():
        problems += structural_problems(sub, f"{path}.properties[{key}]")
    if isinstance(schema.get("additionalProperties"), dict):
        problems += structural_problems(
            schema["additionalProperties"], f"{path}.additionalProperties"
        )
    if isinstance(schema.get("items"), dict):
        problems += structural_problems(schema["items"], f"{path}.items")
    return problems

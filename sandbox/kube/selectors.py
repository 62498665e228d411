"""Label and field selectors as the apiserver parses them (facts §3.3).

Label selectors: ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a)``, ``k``,
``!k``; a comma means AND. Field selectors: ``=``, ``==``, ``!=`` over the field
labels a kind supports; any other field is a 400 ``field label not supported``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sandbox.kube.errors import bad_request
from sandbox.kube.meta import key_problem, label_value_problem

Obj = dict[str, Any]

_TOKEN = re.compile(r"\s*(\(|\)|,|!=|==|=|!|[^\s(),=!]+)")


@dataclass(frozen=True)
class Requirement:
    """One label requirement: ``op`` is in, notin, exists, !exists, =, !=."""

    key: str
    op: str
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        """Whether ``labels`` satisfy this requirement."""
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        return not present or value not in self.values


def _tokens(text: str) -> list[str]:
    tokens: list[str] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            break
        tokens.append(match.group(1))
        pos = match.end()
        if not text[pos:].strip():
            break
    return tokens


def parse_labels(text: str | None) -> list[Requirement]:
    """Parse a label selector (empty matches everything); syntax errors → 400."""
    if not text or not text.strip():
        return []
    tokens = _tokens(text)
    reqs: list[Requirement] = []
    pos = 0
    while pos < len(tokens):
        req, pos = _requirement(tokens, pos, text)
        reqs.append(req)
        if pos < len(tokens):
            if tokens[pos] != ",":
                raise bad_request(
                    f"unable to parse requirement: found '{tokens[pos]}', expected: ','"
                )
            pos += 1
            if pos == len(tokens):
                raise bad_request("unable to parse requirement: found '', expected: identifier")
    return reqs


def _requirement(tokens: list[str], pos: int, text: str) -> tuple[Requirement, int]:
    if tokens[pos] == "!":
        key = _key(tokens, pos + 1)
        return Requirement(key, "!exists"), pos + 2
    key = _key(tokens, pos)
    pos += 1
    if pos == len(tokens) or tokens[pos] == ",":
        return Requirement(key, "exists"), pos
    op = tokens[pos]
    if op in ("=", "==", "!="):
        value = tokens[pos + 1] if pos + 1 < len(tokens) and tokens[pos + 1] not in "()," else ""
        _check_label_value(value)
        step = 2 if value else 1
        return Requirement(key, "!=" if op == "!=" else "=", (value,)), pos + step
    if op in ("in", "notin"):
        values, pos = _value_set(tokens, pos + 1)
        return Requirement(key, op, values), pos
    raise bad_request(
        f"couldn't parse the selector string \"{text}\": unable to parse requirement: found '{op}'"
    )


def _key(tokens: list[str], pos: int) -> str:
    if pos >= len(tokens) or tokens[pos] in ("(", ")", ",", "=", "==", "!=", "!"):
        raise bad_request("unable to parse requirement: expected identifier")
    key = tokens[pos]

    problem = key_problem(key)
    if problem:
        raise bad_request(f'unable to parse requirement: invalid label key "{key}": {problem}')
    return key


def _value_set(tokens: list[str], pos: int) -> tuple[tuple[str, ...], int]:
    if pos >= len(tokens) or tokens[pos] != "(":
        raise bad_request("unable to parse requirement: found '', expected: '('")
    values: list[str] = []
    pos += 1
    while pos < len(tokens) and tokens[pos] != ")":
        if tokens[pos] != ",":
            _check_label_value(tokens[pos])
            values.append(tokens[pos])
        pos += 1
    if pos >= len(tokens):
        raise bad_request("unable to parse requirement: found '', expected: ')'")
    return tuple(values), pos + 1


def _check_label_value(value: str) -> None:

    problem = label_value_problem(value)
    if problem:
        raise bad_request(f'unable to parse requirement: invalid label value: "{value}": {problem}')


def labels_match(reqs: list[Requirement], obj: Obj) -> bool:
    """Whether ``obj``'s labels satisfy every requirement."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(r.matches(labels) for r in reqs)


# --- field selectors ------------------------------------------------------------------


@dataclass(frozen=True)
class FieldTerm:
    """One field requirement: ``field op value`` with op ``=`` or ``!=``."""

    field: str
    op: str
    value: str


def parse_fields(text: str | None, allowed: frozenset[str]) -> list[FieldTerm]:
    """Parse a field selector, refusing fields ``allowed`` does not contain (400)."""
    if not text or not text.strip():
        return []
    terms = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*([^=!\s]+)\s*(==|=|!=)\s*(.*?)\s*", part)
        if match is None:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        name, op, value = match.groups()
        if name not in allowed:
            raise bad_request(f"field label not supported: {name}")
        terms.append(FieldTerm(name, "!=" if op == "!=" else "=", value))
    return terms


def _dig(obj: Obj, path: str) -> Any:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return cur


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


FieldGetter = Callable[[Obj, str], str]


def default_field(obj: Obj, name: str) -> str:
    """The string value of field label ``name`` (missing fields read as ``""``)."""
    if name == "spec.host":
        name = "spec.nodeName"
    if name in ("spec.unschedulable", "spec.hostNetwork"):
        return _text(bool(_dig(obj, name)))
    if name == "source":
        return _text(_dig(obj, "source.component"))
    if name == "status.podIPs":
        return ",".join(p.get("ip", "") for p in _dig(obj, name) or [])
    if name == "metadata.namespace":
        return _text(_dig(obj, name))
    return _text(_dig(obj, name))


def fields_match(terms: list[FieldTerm], obj: Obj, getter: FieldGetter = default_field) -> bool:
    """Whether ``obj`` satisfies every field term."""
    for term in terms:
        equal = getter(obj, term.field) == term.value
        if equal != (term.op == "="):
            return False
    return True

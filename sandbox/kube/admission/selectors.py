"""Label selectors (``matchLabels`` + ``matchExpressions``) as the apiserver evaluates them.

No side effects. Source: kubernetes/apimachinery ``pkg/apis/meta/v1/helpers.go``
(``LabelSelectorAsSelector``) and ``pkg/labels/selector.go``. An empty selector matches
everything; a null one (``None``) is treated as empty, the v1 default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class SelectorError(ValueError):
    """A selector that cannot be evaluated (unknown operator, bad values)."""


def matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """True when ``labels`` satisfy every requirement of ``selector``."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    return all(_expression(e, labels) for e in selector.get("matchExpressions") or [])


def _expression(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key = expr.get("key", "")
    operator = expr.get("operator", "")
    values = list(expr.get("values") or [])
    if operator == "In":
        _need_values(operator, values, True)
        return key in labels and labels[key] in values
    if operator == "NotIn":
        _need_values(operator, values, True)
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        _need_values(operator, values, False)
        return key in labels
    if operator == "DoesNotExist":
        _need_values(operator, values, False)
        return key not in labels
    raise SelectorError(f'"{operator}" is not a valid label selector operator')


def _need_values(operator: str, values: list[Any], wanted: bool) -> None:
    if wanted and not values:
        raise SelectorError(f"for '{operator}' operator, values set can't be empty")
    if not wanted and values:
        raise SelectorError(f"values set must be empty for {operator}")

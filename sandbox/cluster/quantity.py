"""Kubernetes resource quantities (``500m``, ``2``, ``1Gi``, ``1e3``) as exact decimals.

No side effects. Source: kubernetes/apimachinery ``pkg/api/resource/quantity.go``.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[numkMGTPE]i?|)$")


def parse_quantity(value: Any) -> Decimal:
    """The amount a quantity string (or number) stands for; ``ValueError`` if malformed."""
    if isinstance(value, int | float):
        return Decimal(str(value))
    text = str(value).strip()
    found = _QUANTITY.match(text)
    if not found or found.group(2) in ("ni", "ui", "mi", "ki"):
        raise ValueError(f"quantities must match the regular expression: {text!r}")
    number, suffix = found.groups()
    try:
        if suffix[:1] in ("e", "E"):
            return Decimal(number + suffix)
        return Decimal(number) * _SUFFIXES[suffix]
    except (InvalidOperation, KeyError) as exc:
        raise ValueError(f"invalid quantity {text!r}") from exc

"""Tolerations and the reservation taint ``gpu-class-reservation=<class>:NoSchedule``.

Reserved nodes carry that taint; a pod may tolerate it only when the system granted
it (DESIGN §10). This module answers, with Kubernetes' own matching rules, whether a
toleration tolerates the taint — for one class or for any — and builds the exact
toleration the system grants.

Kubernetes' rule (``ToleratesTaint``): the effect must be empty (all effects) or equal
the taint's; an empty key with ``operator: Exists`` matches every key, otherwise the
keys must be equal; ``Exists`` matches any value, ``Equal`` (the default operator)
needs equal values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared import vocab
from shared.policy import MAP

EXISTS = "Exists"
EQUAL = "Equal"


def _text(toleration: Mapping[str, Any], key: str) -> str:
    value = toleration.get(key)
    return value if isinstance(value, str) else ""


def _effect_matches(toleration: Mapping[str, Any]) -> bool:
    return _text(toleration, "effect") in ("", vocab.TAINT_EFFECT_NO_SCHEDULE)


def _key_matches(toleration: Mapping[str, Any]) -> bool:
    key = _text(toleration, "key")
    if not key:
        return _text(toleration, "operator") == EXISTS
    return key == vocab.RESERVATION_TAINT_KEY


def tolerates_reservation(toleration: Any, gpu_class: str | None = None) -> bool:
    """Whether ``toleration`` tolerates the reservation taint of ``gpu_class``.

    With ``gpu_class=None`` the question is "of some class": an ``Equal`` toleration
    with any value tolerates the taint of the class named by that value. Something
    that is not an object tolerates nothing.
    """
    if not isinstance(toleration, MAP):
        return False
    if not (_effect_matches(toleration) and _key_matches(toleration)):
        return False
    operator = _text(toleration, "operator") or EQUAL
    if operator == EXISTS:
        return True
    if operator != EQUAL:
        return False
    return gpu_class is None or _text(toleration, "value") == gpu_class


def granted_toleration(gpu_class: str) -> dict[str, str]:
    """The toleration the system grants an admitted pod of ``gpu_class``."""
    return {
        "key": vocab.RESERVATION_TAINT_KEY,
        "operator": EQUAL,
        "value": gpu_class,
        "effect": vocab.TAINT_EFFECT_NO_SCHEDULE,
    }


def is_granted(toleration: Any, gpu_class: str) -> bool:
    """The exact-match test of R3: our key, the pod's class as value, NoSchedule."""
    if not isinstance(toleration, MAP):
        return False
    return (
        _text(toleration, "key") == vocab.RESERVATION_TAINT_KEY
        and _text(toleration, "value") == gpu_class
        and _text(toleration, "effect") == vocab.TAINT_EFFECT_NO_SCHEDULE
        and (_text(toleration, "operator") or EQUAL) == EQUAL
    )


def tolerations_of(pod: Any) -> list[Any]:
    """The pod's ``spec.tolerations`` (empty when absent or malformed)."""
    spec = pod.get("spec") if isinstance(pod, MAP) else None
    value = spec.get("tolerations") if isinstance(spec, MAP) else None
    return value if isinstance(value, list) else []


def reservation_tolerations(pod: Any) -> list[int]:
    """Indexes of the pod's tolerations that tolerate the reservation taint (any class)."""
    return [i for i, t in enumerate(tolerations_of(pod)) if tolerates_reservation(t)]


def added_reservation_tolerations(old_pod: Any, new_pod: Any) -> list[Any]:
    """Tolerations of ``new_pod`` tolerating the taint that ``old_pod`` did not carry.

    Compared ignoring ``tolerationSeconds`` (the one field an update may change).
    """
    before = [_identity(t) for t in tolerations_of(old_pod)]
    return [
        t
        for t in tolerations_of(new_pod)
        if tolerates_reservation(t) and _identity(t) not in before
    ]


def _identity(toleration: Any) -> Any:
    if not isinstance(toleration, MAP):
        return toleration
    return {k: v for k, v in toleration.items() if k != "tolerationSeconds"}

"""Kill points: stop a reconciler process at one of its I/O await points.

``KillSwitch`` wraps the gateway and the app client a ``Reconciler`` is built with.
Every call of a coroutine method through the wrapper is one *await point*; the
switch counts the writing ones (Kubernetes create/replace/patch/delete, every app
call but reads) and, at number ``at``, kills the process: *before* the call (its
effect never lands) or *after* it (its effect landed, the answer is lost). ``Killed``
is a ``BaseException``, so no ``except Exception`` in the product can swallow it, as
no handler survives a SIGKILL. The test then builds a new process on the same
cluster and app (``FaultWorld.restart``): nothing in memory survives.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

#: Gateway verbs that write; app calls other than these reads write too.
KUBE_WRITES = frozenset({"create", "replace", "patch", "delete"})
APP_READS = frozenset({"list_reservations", "list_gpu_classes", "get_gpu_class", "list_groups"})
GATEWAY_VERBS = frozenset({"get", "list_all", "watch", "request", *KUBE_WRITES})


class Killed(BaseException):
    """The process died at this await point."""


class KillSwitch:
    """Counts write calls once ``armed``; kills at number ``at`` (None: never), before
    or after it. Unarmed, calls pass uncounted (the process builds its state first)."""

    def __init__(self, at: int | None = None, *, after: bool = False, armed: bool = True) -> None:
        self.at = at
        self.after = after
        self.armed = armed
        self.writes: list[str] = []

    def wrap(self, target: Any) -> Any:
        return _Killable(target, self)

    def _is_write(self, target: Any, name: str) -> bool:
        if name in GATEWAY_VERBS:
            return name in KUBE_WRITES
        return name not in APP_READS

    async def call(self, target: Any, name: str, method: Callable[..., Any], *a: Any, **kw: Any):
        if not self.armed or not self._is_write(target, name):
            return await method(*a, **kw)
        self.writes.append(f"{name}{_what(a)}")
        due = self.at is not None and len(self.writes) == self.at
        if due and not self.after:
            raise Killed(f"before {self.writes[-1]}")
        result = await method(*a, **kw)
        if due:
            raise Killed(f"after {self.writes[-1]}")
        return result


def _what(args: tuple[Any, ...]) -> str:
    """A short label of the call's target, for the table."""
    first = args[0] if args else None
    plural = getattr(first, "plural", None)
    return f" {plural}" if plural else (f" {first}" if isinstance(first, int) else "")


class _Killable:
    """``target`` with every coroutine method routed through the switch."""

    def __init__(self, target: Any, switch: KillSwitch) -> None:
        self._target = target
        self._switch = switch

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        async def routed(*a: Any, **kw: Any) -> Any:
            return await self._switch.call(self._target, name, attr, *a, **kw)

        return routed

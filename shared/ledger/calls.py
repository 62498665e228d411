"""The ledger's API calls on one reservation, each cut off at the caller's deadline.

``Target`` is one reservation as the compare-and-swap loops (``shared.ledger.cas``)
talk to it: read it, write its ``/status`` by PUT or JSON Patch, and tell a lost race
(409, or 422 from a failed ``test``) from everything else, which ends the loop with a
``Stop`` carrying its reason.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

from shared import model
from shared.errors import Conflict, Invalid, KubeError, NotFound
from shared.ledger.arithmetic import Reason
from shared.ledger.patches import tests_hold
from shared.logs import log
from shared.model import GPUReservation
from shared.resources import GPU_RESERVATIONS, Resource

_log = logging.getLogger("shared.ledger")
T = TypeVar("T")


class LedgerGateway(Protocol):
    """What the ledger needs of ``shared.gateway.Gateway`` (which satisfies it)."""

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        """GET one object."""
        ...

    async def replace(
        self,
        res: Resource,
        name: str,
        body: dict[str, Any],
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """PUT an object or one of its subresources."""
        ...

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: dict[str, Any] | list[dict[str, Any]],
        namespace: str | None = None,
        patch_type: Literal["json", "merge", "strategic"] = "json",
        subresource: str | None = None,
        read_answer: bool = True,
    ) -> dict[str, Any]:
        """PATCH an object or one of its subresources (a JSON Patch by default); with
        ``read_answer=False`` the answer need not be decoded (the caller ignores it)."""
        ...


class Stop(Exception):
    """Ends a read-decide-write loop with a reason (not found, deadline, error)."""

    def __init__(self, reason: Reason) -> None:
        super().__init__(reason)
        self.reason = reason


#: A write's answer: the object written, or the code of a lost race (409 or 422).
Answer = dict[str, Any] | int


@dataclass(frozen=True, slots=True)
class Target:
    """One reservation's calls: ``deadline`` is a ``monotonic()`` instant after which
    no call starts and at which every call is cut off (``Stop(DEADLINE)``)."""

    gateway: LedgerGateway
    namespace: str
    name: str
    deadline: float
    monotonic: Callable[[], float]

    async def read(self) -> dict[str, Any]:
        """GET the object."""
        try:
            return await self._within(self.gateway.get(GPU_RESERVATIONS, self.name, self.namespace))
        except NotFound as exc:
            raise Stop(Reason.NOT_FOUND) from exc
        except KubeError as exc:
            log(_log, logging.WARNING, "ledger.read_failed", reservation=self.name, error=str(exc))
            raise Stop(Reason.ERROR) from exc

    async def reread(self, code: int, ops: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """The object read again after a write lost its race (``code`` 409 or 422). When
        a 422 answered a write whose ``test`` operations all hold on the re-read, it was
        not a race (an invalid entry, say): ``Stop(ERROR)`` instead of a loop."""
        raw = await self.read()
        if code == 422 and tests_hold(ops, raw):
            error = "422 not stale"
            log(_log, logging.WARNING, "ledger.write_failed", reservation=self.name, error=error)
            raise Stop(Reason.ERROR)
        return raw

    async def put(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """PUT ``/status``: the object as written; None on a 409 (someone wrote first)."""
        call = self.gateway.replace(
            GPU_RESERVATIONS, self.name, body, self.namespace, subresource="status"
        )
        written = await self._written(call, stale_if_invalid=False)
        return None if isinstance(written, int) else written

    async def patch(self, ops: list[dict[str, Any]], *, quiet: bool = False) -> Answer:
        """JSON Patch ``/status``: the object as written (``quiet``: not read, ``{}``);
        the code of a lost race: 409 (stale), or 422 when ``ops`` hold ``test``
        operations (a failed test is a 422 Invalid, kubernetes-facts §3.1; the caller
        re-reads to tell a race from anything else)."""
        call = self.gateway.patch(
            GPU_RESERVATIONS,
            self.name,
            ops,
            self.namespace,
            "json",
            subresource="status",
            read_answer=not quiet,
        )
        tested = any(op.get("op") == "test" for op in ops)
        return await self._written(call, stale_if_invalid=tested)

    def parse(self, raw: dict[str, Any]) -> GPUReservation:
        """``raw`` parsed; ``Stop(ERROR)`` (logged) when malformed."""
        try:
            return model.from_object(raw)
        except ValueError as exc:
            log(_log, logging.WARNING, "ledger.malformed", reservation=self.name, error=str(exc))
            raise Stop(Reason.ERROR) from exc

    async def _written(self, call: Awaitable[dict[str, Any]], stale_if_invalid: bool) -> Answer:
        """The answer to a ledger write; 409 for a 409 (or 422 for a 422 when
        ``stale_if_invalid``): a lost race; a stop for anything else."""
        name = self.name
        try:
            return await self._within(call)
        except Conflict:
            log(_log, logging.DEBUG, "ledger.claim_conflict", reservation=name)
            return 409
        except Invalid as exc:
            if not stale_if_invalid:
                log(_log, logging.WARNING, "ledger.write_failed", reservation=name, error=str(exc))
                raise Stop(Reason.ERROR) from exc
            log(_log, logging.DEBUG, "ledger.claim_conflict", reservation=name)
            return 422
        except NotFound as exc:
            raise Stop(Reason.NOT_FOUND) from exc
        except KubeError as exc:
            log(_log, logging.WARNING, "ledger.write_failed", reservation=name, error=str(exc))
            raise Stop(Reason.ERROR) from exc

    async def _within(self, call: Awaitable[T]) -> T:
        remaining = self.deadline - self.monotonic()
        if remaining <= 0:
            if asyncio.iscoroutine(call):
                call.close()
            raise Stop(Reason.DEADLINE)
        try:
            async with asyncio.timeout(remaining):  # not wait_for: it can swallow a cancel
                return await call
        except TimeoutError as exc:
            raise Stop(Reason.DEADLINE) from exc


def echo(
    written: dict[str, Any], updated: GPUReservation
) -> tuple[GPUReservation, dict[str, Any] | None]:
    """The object the server answered a write with, parsed, and the raw echo."""
    try:
        return model.from_object(written), written
    except ValueError:
        return updated, None  # the write succeeded; an odd echo does not undo it


def log_stop(event: str, name: str, reason: Reason, conflicts: int | None) -> None:
    """A loop ended by a ``Stop``: INFO for a missing object or a deadline, else WARNING."""
    level = logging.INFO if reason in {Reason.NOT_FOUND, Reason.DEADLINE} else logging.WARNING
    log(_log, level, event, reservation=name, reason=reason.value, conflicts=conflicts)

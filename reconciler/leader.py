"""Leader election on a coordination.k8s.io Lease (DESIGN §5).

Every replica serves HTTP; only the leader runs the loops that act. The decision is a
pure function of the Lease as read, this replica's identity and now:

- no Lease → create it (acquire);
- we hold it → renew;
- nobody holds it, or its holder has not renewed for ``leaseDurationSeconds`` → take
  over (``leaseTransitions`` + 1). "Not renewed for" is timed on this replica's own
  clock from when it last saw the Lease record change (client-go's observed time), never
  by comparing the holder's ``renewTime`` with our clock: clock skew between replicas
  cannot make two act at once. The price: a standby that starts (or first looks) after
  the leader died waits a full lease duration from its first look;
- otherwise → stand by, and look again when it would expire (at the latest after
  the renew period), so a standby that was watching takes over within the lease
  duration plus one renew period of the last renewal.

Every write carries the resourceVersion that was read, so two standbys racing for an
expired Lease cannot both win. A leader that cannot renew for ``lease − renew``
seconds steps down before anyone else may take over — also when its renew request
hangs (the step is cut off at that deadline), and it renews at least every
``(lease − renew) / 2`` seconds so a healthy leader never reaches it. On shutdown the
leader releases the Lease (empty holder) so a standby takes over at its next look.

The leader's writes also carry what it publishes for users on the Lease (the
reservation app's health, ``reconciler.base.apphealth``): one writer, one write per renew,
so publishing never makes a renew conflict with itself.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from reconciler.base.loops import wait_either
from reconciler.base.settings import LeaderSettings
from shared import vocab
from shared.clock import Clock, parse_utc
from shared.errors import Conflict, KubeError, NotFound
from shared.logs import log
from shared.resources import LEASES, Resource

_log = logging.getLogger(__name__)


class Action(StrEnum):
    """What a replica does after reading the Lease."""

    CREATE = "create"
    RENEW = "renew"
    TAKEOVER = "takeover"
    STANDBY = "standby"


@dataclass(frozen=True)
class LeaseView:
    """The parts of a Lease the decision reads."""

    holder: str | None
    renewed: datetime | None
    duration_s: float
    transitions: int = 0

    def record(self) -> tuple[str | None, datetime | None, float, int]:
        """What a change of marks a live holder (client-go's observed record)."""
        return (self.holder, self.renewed, self.duration_s, self.transitions)


def lapses(view: LeaseView, observed: datetime) -> datetime | None:
    """When the holder's claim lapses for this replica: ``leaseDurationSeconds`` after
    ``observed``, the instant (on this replica's own clock) it last saw the Lease record
    change — as client-go times it. The holder's ``renewTime`` is written on the
    holder's clock, so comparing it with ours would let clock skew larger than the renew
    period make a standby take over while the leader still acts. None: never renewed."""
    if view.renewed is None:
        return None
    return observed + timedelta(seconds=view.duration_s)


def decide(view: LeaseView | None, me: str, now: datetime, observed: datetime) -> Action:
    """The election rule (no side effects); expiry is strict: at the lapse it lapses."""
    if view is None:
        return Action.CREATE
    if view.holder == me:
        return Action.RENEW
    expires = lapses(view, observed)
    if not view.holder or expires is None or now >= expires:
        return Action.TAKEOVER
    return Action.STANDBY


def wait_seconds(
    view: LeaseView | None, action: Action, now: datetime, renew_s: float, observed: datetime
) -> float:
    """How long to wait before the next look: the renew period, or less for a standby
    whose holder's lease lapses sooner."""
    if action is not Action.STANDBY or view is None:
        return renew_s
    expires = lapses(view, observed)
    if expires is None:
        return renew_s
    return max(0.01, min(renew_s, (expires - now).total_seconds() + 0.01))


def format_micro(instant: datetime) -> str:
    """metav1.MicroTime: RFC 3339 with exactly six fractional digits."""
    return instant.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def view_of(obj: dict[str, Any]) -> LeaseView:
    """Read a Lease object; unreadable times count as never renewed."""
    spec = obj.get("spec") or {}
    renewed = None
    if isinstance(spec.get("renewTime"), str):
        try:
            renewed = parse_utc(spec["renewTime"])
        except ValueError:
            renewed = None
    duration = spec.get("leaseDurationSeconds")
    transitions = spec.get("leaseTransitions")
    return LeaseView(
        holder=spec.get("holderIdentity") or None,
        renewed=renewed,
        duration_s=float(duration) if isinstance(duration, int) and duration > 0 else 0.0,
        transitions=transitions if isinstance(transitions, int) else 0,
    )


def lease_body(
    raw: dict[str, Any] | None,
    me: str,
    now: datetime,
    action: Action,
    lease_s: float,
    ns: str,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The Lease to write for ``action`` (keeps the read metadata and resourceVersion);
    ``annotations`` are set on it (what the leader publishes, ``reconciler.base.apphealth``):
    carried by the election's own write, they never race it."""
    view = view_of(raw) if raw is not None else None
    spec = dict((raw or {}).get("spec") or {})
    spec.update(
        holderIdentity=me,
        leaseDurationSeconds=max(1, math.ceil(lease_s)),
        renewTime=format_micro(now),
    )
    if action is not Action.RENEW:
        spec["acquireTime"] = format_micro(now)
        spec["leaseTransitions"] = (view.transitions + 1) if view else 0
    body = dict(raw) if raw is not None else _new_lease(ns)
    body["spec"] = spec
    if annotations:
        meta = dict(body.get("metadata") or {})
        meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
        body["metadata"] = meta
    return body


def _new_lease(ns: str) -> dict[str, Any]:
    return {
        "apiVersion": LEASES.api_version,
        "kind": LEASES.kind,
        "metadata": {"name": vocab.LEADER_LEASE_NAME, "namespace": ns},
    }


class LeaseGateway(Protocol):
    """The gateway calls the elector makes."""

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
        """PUT one object."""
        ...

    async def create(
        self, res: Resource, body: dict[str, Any], namespace: str | None = None
    ) -> object:
        """POST a new object."""
        ...


class Elector:
    """Runs the election; calls ``on_change(True/False)`` when leadership changes."""

    def __init__(
        self,
        gateway: LeaseGateway,
        namespace: str,
        identity: str,
        clock: Clock,
        settings: LeaderSettings,
        on_change: Callable[[bool], None],
        annotations: Callable[[], Mapping[str, str]] = dict,
    ) -> None:
        self._gateway = gateway
        #: What the leader publishes on the Lease with each write (``lease_body``).
        self._annotations = annotations
        self._ns = namespace
        self.identity = identity
        self._clock = clock
        self._settings = settings
        self._on_change = on_change
        self.is_leader = False
        self._last_renew: datetime | None = None
        self._wait = settings.renew_s
        #: The Lease record last seen and when it was first seen so (own clock).
        self._seen: tuple[str | None, datetime | None, float, int] | None = None
        self._seen_at: datetime = clock.now()

    async def run(self) -> None:
        """Look, act, wait — until cancelled."""
        while True:
            await self.bounded_step()
            await self._clock.sleep(self._wait)

    def _limit_s(self) -> float:
        """How long after its last renew a leader may act without renewing again."""
        return self._settings.lease_s - self._settings.renew_s

    async def bounded_step(self) -> None:
        """``step``, but a leader whose step is still unanswered when its renew deadline
        (last renew + lease − renew) passes steps down then: a hung request must not keep
        it acting while a standby takes the lapsed Lease over."""
        if not self.is_leader or self._last_renew is None:
            await self.step()
            return
        left = (self._last_renew - self._clock.now()).total_seconds() + self._limit_s()
        if not await wait_either(self.step(), self._clock.sleep(left)):
            log(_log, logging.WARNING, "leader.renew_timeout", identity=self.identity)
            self._wait = self._settings.renew_s
            self._set(False)

    async def step(self) -> None:
        """One round of the election."""
        now = self._clock.now()
        try:
            raw = await self._read()
            view = view_of(raw) if raw is not None else None
            observed = self._observe(view, now)
            action = decide(view, self.identity, now, observed)
            self._wait = wait_seconds(view, action, now, self._settings.renew_s, observed)
            if action is not Action.STANDBY:
                # Renew with at least half the step-down margin to spare.
                self._wait = min(self._wait, self._limit_s() / 2)
            if action is Action.STANDBY:
                self._set(False, holder=view.holder if view else None)
                return
            await self._write(raw, action, now)
        except Conflict:
            self._wait = 0.05  # someone wrote first: look again at once
            self._set(False)
        except KubeError as exc:
            log(_log, logging.WARNING, "leader.lease_error", error=str(exc))
            self._wait = self._settings.renew_s
            self._step_down_if_stale(now)

    def _observe(self, view: LeaseView | None, now: datetime) -> datetime:
        """When this replica first saw the record ``view`` carries (now, if it changed)."""
        record = view.record() if view is not None else None
        if record != self._seen:
            self._seen, self._seen_at = record, now
        return self._seen_at

    async def release(self) -> None:
        """Give the Lease up (empty holder) if we hold it; best-effort."""
        if not self.is_leader:
            return
        self._set(False)
        try:
            raw = await self._read()
            if raw is None or view_of(raw).holder != self.identity:
                return
            body = dict(raw, spec={**raw.get("spec", {}), "holderIdentity": None})
            await self._gateway.replace(LEASES, vocab.LEADER_LEASE_NAME, body, self._ns)
            log(_log, logging.INFO, "leader.released", identity=self.identity)
        except KubeError as exc:
            log(_log, logging.WARNING, "leader.release_failed", error=str(exc))

    async def _read(self) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = await self._gateway.get(LEASES, vocab.LEADER_LEASE_NAME, self._ns)
        except NotFound:
            return None
        return obj

    async def _write(self, raw: dict[str, Any] | None, action: Action, now: datetime) -> None:
        body = lease_body(
            raw,
            self.identity,
            now,
            action,
            self._settings.lease_s,
            self._ns,
            self._annotations(),
        )
        if raw is None:
            await self._gateway.create(LEASES, body, self._ns)
        else:
            await self._gateway.replace(LEASES, vocab.LEADER_LEASE_NAME, body, self._ns)
        self._last_renew = now
        if action is not Action.RENEW or not self.is_leader:
            log(_log, logging.INFO, "leader.acquired", identity=self.identity, how=action.value)
        self._set(True)

    def _step_down_if_stale(self, now: datetime) -> None:
        if not self.is_leader or self._last_renew is None:
            return
        limit = self._settings.lease_s - self._settings.renew_s
        if (now - self._last_renew).total_seconds() >= limit:
            self._set(False)

    def _set(self, leading: bool, holder: str | None = None) -> None:
        if leading == self.is_leader:
            return
        self.is_leader = leading
        if not leading:
            log(_log, logging.WARNING, "leader.lost", identity=self.identity, holder=holder)
        self._on_change(leading)

"""The mirror: one ``GPUReservation`` object ``res-<id>`` per reservation of the app.

``facts_from`` turns an app reservation into the object's spec (pure); ``plan`` decides
what a full sync changes (pure); ``MirrorWriter`` performs the writes. Rules:

- a reservation is mirrored only when its GPU class has a label value (otherwise no pod
  can use it); the class map from ``GET /api/gpu-classes`` is the source of truth, the
  label embedded in the reservation the fallback for a class missing from the map;
- a spec is written only when it changed, and only when the app's ``updated_at`` is at
  least the stored one, so a slow poll never undoes a newer push (checked again on
  every retry: writes carry the resourceVersion they were decided on);
- an object whose window has ended (and the usage retention after it) and that no
  live pod references is deleted; an ended reservation is never (re)created unless a
  pod references it;
- active entries are written before cancelled ones (``installed_first``), so a
  replacement exists before the leader sees its source cancelled;
- status (ledger) is never touched here except to refresh ``phase``/``usedGpus``,
  always by a resourceVersion-checked write of the ledger as read; a new object's
  status may come after its create (an absent status reads as an empty ledger).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from reconciler.base.apphealth import AppHealth
from reconciler.base.kube import KubeWriter
from reconciler.base.metrics import Metrics
from shared import model
from shared.appclient.models import GpuClass, Reservation
from shared.errors import Conflict, KubeError, NotFound
from shared.ledger import status_body
from shared.logs import log
from shared.resources import GPU_RESERVATIONS

_log = logging.getLogger(__name__)
_KINDS = {k.value: k for k in model.Kind}
_STATES = {s.value: s for s in model.State}
_RETRIES = 5


def facts_from(r: Reservation, classes: Mapping[int, GpuClass]) -> model.ReservationFacts | None:
    """The spec for ``r``; ``None`` when it cannot be mirrored (no label, no owner,
    unknown status). An unknown kind is kept as a booking (protected, contract §3.6)."""
    cls = classes.get(r.gpu_class_id)
    label = cls.label_value if cls is not None else r.gpu_class.label_value
    state = _STATES.get(r.status)
    if not label or not r.username or state is None:
        return None
    return model.ReservationFacts(
        id=r.id,
        owner=r.username,
        gpu_class=label,
        gpu_class_name=cls.name if cls is not None else r.gpu_class.name,
        gpu_count=r.gpu_count,
        kind=_KINDS.get(r.kind, model.Kind.BOOKING),
        start=r.start_utc,
        end=r.end_utc,
        state=state,
        updated_at=r.updated_at,
        owner_id=r.user_id,
        group=r.group_name,
        cancel_reason=r.cancel_reason,
    )


def newer_or_same(new: model.ReservationFacts, stored: model.ReservationFacts) -> bool:
    """Whether ``new`` may replace ``stored`` (never move a mirror backwards)."""
    return new.updated_at >= stored.updated_at


def installed_first(facts: model.ReservationFacts) -> bool:
    """Sort key of the writes: active entries before the others (stable otherwise).

    The leader reacts to each write as its watch delivers it, so a booking that replaces
    a cancelled one must exist before the cancellation lands: then its pods are re-linked
    onto it, not evicted (contract: install the new set → re-link → evict the rest)."""
    return facts.state is not model.State.ACTIVE


@dataclass(frozen=True)
class Plan:
    """What one full sync writes."""

    upserts: tuple[model.ReservationFacts, ...]
    deletes: tuple[str, ...]
    refresh: tuple[str, ...]


def plan(
    fetched: Iterable[model.ReservationFacts],
    existing: Mapping[str, model.GPUReservation],
    stored_phase: Mapping[str, str],
    referenced: set[str],
    now: datetime,
    retention: timedelta = timedelta(0),
) -> Plan:
    """Decide a full sync (no side effects).

    ``existing`` maps object names to what is stored; ``stored_phase`` the phase in
    each object's status; ``referenced`` the names live pods carry; ``retention``
    (USAGE_RETENTION_DAYS) how long an ended object is kept for its usage
    record before it is deleted.
    """
    upserts: list[model.ReservationFacts] = []
    seen: set[str] = set()
    for facts in fetched:
        seen.add(facts.name)
        current = existing.get(facts.name)
        ended = facts.end <= now and facts.name not in referenced
        if current is None:
            if not ended:
                upserts.append(facts)
        elif current.facts != facts and newer_or_same(facts, current.facts):
            upserts.append(facts)
    upserts.sort(key=installed_first)
    planned = {f.name for f in upserts}
    deletes = tuple(
        name
        for name, res in existing.items()
        if res.facts.end + retention <= now and name not in referenced and name not in planned
    )
    refresh = tuple(
        name
        for name, res in existing.items()
        if name not in planned
        and name not in deletes
        and stored_phase.get(name) != res.facts.phase(now).value
    )
    return Plan(tuple(upserts), deletes, refresh)


class MirrorWriter:
    """Writes GPUReservation objects in one namespace (sync and push share it)."""

    def __init__(self, gateway: KubeWriter, namespace: str, metrics: Metrics) -> None:
        self._gateway = gateway
        self._ns = namespace
        self._metrics = metrics

    async def upsert(
        self,
        facts: model.ReservationFacts,
        now: datetime,
        *,
        absent: bool = False,
        later: dict[str, dict[str, Any]] | None = None,
    ) -> str:
        """Create or update ``res-<id>``; returns created/updated/unchanged/stale/failed.

        ``absent``: the caller has just listed the mirror without it, so it is created
        without a read first; if someone created it meanwhile (409) this is an ordinary
        upsert. ``later``: such a create leaves its status unwritten and its answer in
        ``later`` (name → object), for ``refresh_status`` afterwards.
        """
        if absent:
            try:
                return await self._create(facts, now, later)
            except Conflict:
                pass
            except KubeError as exc:
                return self._failed("upsert", facts.name, exc)
        for _ in range(_RETRIES):
            try:
                return await self._upsert_once(facts, now)
            except Conflict:
                continue  # a ledger write or a racing writer: re-read and decide again
            except KubeError as exc:
                return self._failed("upsert", facts.name, exc)
        return self._failed("upsert", facts.name, KubeError(409, "kept conflicting"))

    async def install(
        self, facts: model.ReservationFacts, now: datetime
    ) -> model.GPUReservation | None:
        """The object of a reservation just granted (an on-demand lease), as written.

        One POST when it is new — its ledger is empty and the first claim writes the
        status, so no status write and no read-back are needed; when it exists already
        (a replayed grant) the ordinary upsert and a read. None when either failed."""
        res = model.GPUReservation(facts)
        try:
            answer = await self._gateway.create(
                GPU_RESERVATIONS, model.to_object(res, self._ns, now), self._ns
            )
        except Conflict:
            if await self.upsert(facts, now) == "failed":
                return None
            try:
                return model.from_object(
                    await self._gateway.get(GPU_RESERVATIONS, facts.name, self._ns)
                )
            except (KubeError, ValueError) as exc:
                self._failed("read", facts.name, exc)
                return None
        except KubeError as exc:
            self._failed("create", facts.name, exc)
            return None
        self._wrote("created", facts.name)
        try:
            return model.from_object(answer.body)
        except ValueError as exc:
            self._failed("read", facts.name, exc)
            return None

    async def delete(self, name: str) -> bool:
        """Delete the object; gone already counts as done."""
        try:
            await self._gateway.delete(GPU_RESERVATIONS, name, self._ns)
        except NotFound:
            return True
        except KubeError as exc:
            self._failed("delete", name, exc)
            return False
        self._wrote("deleted", name)
        return True

    async def refresh_status(
        self, name: str, now: datetime, raw: dict[str, Any] | None = None
    ) -> None:
        """Rewrite status so ``phase`` is current (the ledger as read, CAS-checked).

        ``raw``: the object as last seen (e.g. a create's answer), written against its
        resourceVersion without a read; a conflict means a claim or a spec write has
        written the status since (with a current phase), and is left alone."""
        try:
            if raw is None:
                raw = await self._gateway.get(GPU_RESERVATIONS, name, self._ns)
            res = model.from_object(raw)
            await self._put_status(raw, res, now)
        except Conflict:
            return  # someone wrote the ledger, and with it a fresh phase
        except (KubeError, ValueError) as exc:
            self._failed("status", name, exc)
            return
        self._wrote("status", name)

    async def _upsert_once(self, facts: model.ReservationFacts, now: datetime) -> str:
        try:
            raw = await self._gateway.get(GPU_RESERVATIONS, facts.name, self._ns)
        except NotFound:
            return await self._create(facts, now)
        try:
            current: model.GPUReservation | None = model.from_object(raw)
        except ValueError:
            current = None  # a damaged object: the app's facts win
        if current is not None and current.facts == facts:
            return "unchanged"
        if current is not None and not newer_or_same(facts, current.facts):
            log(_log, logging.INFO, "mirror.stale_skipped", reservation=facts.name)
            return "stale"
        body = dict(raw, spec=model.facts_to_spec(facts))
        written = await self._gateway.replace(GPU_RESERVATIONS, facts.name, body, self._ns)
        await self._put_status(written, model.GPUReservation(facts), now, quiet=True)
        self._wrote("updated", facts.name)
        return "updated"

    async def _create(
        self,
        facts: model.ReservationFacts,
        now: datetime,
        later: dict[str, dict[str, Any]] | None = None,
    ) -> str:
        res = model.GPUReservation(facts)
        answer = await self._gateway.create(
            GPU_RESERVATIONS, model.to_object(res, self._ns, now), self._ns
        )
        if later is None:
            await self._put_status(answer.body, res, now, quiet=True)
        else:
            later[facts.name] = answer.body
        self._wrote("created", facts.name)
        return "created"

    async def _put_status(
        self, raw: dict[str, Any], res: model.GPUReservation, now: datetime, quiet: bool = False
    ) -> None:
        """Write status from the ledger in ``raw`` (``res`` supplies the facts)."""
        try:
            stored = model.from_object(raw)
            holds, extra, token = stored.holds, stored.status_extra, stored.token
        except ValueError:
            holds, extra, token = res.holds, res.status_extra, res.token
        # The ledger token is kept: the holds are the ones read, CAS-checked, so no
        # claim decided on this ledger is made wrong by this write (shared.ledger).
        current = replace(res, holds=holds, status_extra=extra, token=token)
        try:
            await self._gateway.replace(
                GPU_RESERVATIONS, res.name, status_body(raw, current, now), self._ns, "status"
            )
        except Conflict:
            if not quiet:
                raise

    def _wrote(self, action: str, name: str) -> None:
        self._metrics.mirror_writes.labels(action).inc()
        log(_log, logging.INFO, f"mirror.{action}", reservation=name)

    def _failed(self, action: str, name: str, exc: Exception) -> str:
        self._metrics.mirror_errors.labels(action).inc()
        log(
            _log,
            logging.WARNING,
            "mirror.write_failed",
            action=action,
            reservation=name,
            error=str(exc),
        )
        return "failed"


class MirrorView(Protocol):
    """What the mirror knows of the reservation app, for the components that act on
    it without polling it themselves (``reconciler.mirror.sync.Syncer``)."""

    @property
    def writer(self) -> MirrorWriter:
        """The writer of GPUReservation objects."""
        ...

    @property
    def classes(self) -> Mapping[int, GpuClass]:
        """The app's GPU classes by id, as last fetched."""
        ...

    @property
    def health(self) -> AppHealth:
        """The app's health as this process's calls see it."""
        ...

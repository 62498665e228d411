"""Advisory selections: which pending pods to admit, which overstaying pods to kill.

Admission (§2.7) policies, switchable through the control API:

- ``grant_all`` (the app's current policy): every candidate, in request order, no
  ``withheld``;
- ``judge``: a dry run of the gates per candidate (capacity counted cumulatively in
  request order); refused candidates are withheld with their envelope;
- ``fixed``: answer the configured ``granted`` uids (those offered) and ``withheld``
  entries verbatim.

Victims (§2.8): per class with a positive need, candidates ordered by the tier of their
reservation's kind (best-effort, on-demand, booking; an unknown reservation counts as
a booking), shuffled within a tier by the seeded RNG, accepted greedily until the
need is covered; ``uniform`` mode drops the tiers (the older app).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sandbox.app.bodies import AdmissionBody, Candidate, VictimCandidate, VictimsBody
from sandbox.app.errors import envelope
from sandbox.app.gates import Ask, Refusal, judge
from sandbox.app.state import AppState, Reservation
from shared.appclient.models import ReservationKind

_TIERS: dict[str, int] = {ReservationKind.BEST_EFFORT: 0, ReservationKind.ON_DEMAND: 1}
_BOOKING_TIER = 2


@dataclass
class Policies:
    """The switchable policies and the seeded RNG they draw from."""

    seed: int = 0
    admission: str = "grant_all"
    fixed_granted: list[str] = field(default_factory=list)
    fixed_withheld: list[Any] = field(default_factory=list)
    victims: str = "tiered"
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def reseed(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)


def _candidate_ask(state: AppState, c: Candidate, now: datetime) -> Ask | Refusal | None:
    """The ask a candidate stands for; None when a natural key is unknown."""
    user = state.user_named(c.username)
    group = state.group_named(c.group_name) if c.group_name else None
    klass = state.classes.get(c.gpu_class_id)
    if user is None or group is None or klass is None:
        return None
    kind = ReservationKind.BEST_EFFORT if c.best_effort else ReservationKind.ON_DEMAND
    end = now if c.best_effort else now + timedelta(seconds=c.duration_seconds)
    return Ask(user, group, klass, c.gpu_count, now, end, kind)


def _judged(state: AppState, body: AdmissionBody, now: datetime) -> dict[str, Any]:
    granted: list[str] = []
    withheld: list[dict[str, Any]] = []
    tentative: list[Reservation] = []
    for c in body.candidates:
        ask = _candidate_ask(state, c, now)
        refusal = judge(state, ask, now) if isinstance(ask, Ask) else None
        if refusal is not None:
            withheld.append({"pod_uid": c.pod_uid, **envelope(refusal)})
            continue
        granted.append(c.pod_uid)
        if isinstance(ask, Ask) and not ask.is_stub:
            tentative.append(_hold(state, ask, now))
    for row in tentative:
        del state.reservations[row.id]
    return {"granted_pod_uids": granted, "withheld": withheld}


def _hold(state: AppState, ask: Ask, now: datetime) -> Reservation:
    """A temporary row so later candidates in the batch see this one's capacity."""
    row = Reservation(
        -len(state.reservations) - 1,
        ask.user.id,
        ask.group.id,
        ask.klass.id,
        ask.start,
        ask.end,
        ask.gpu_count,
        ask.kind,
        now,
        now,
    )
    state.reservations[row.id] = row
    return row


def select_admissions(
    state: AppState, policies: Policies, body: AdmissionBody, now: datetime
) -> dict[str, Any]:
    """The ``/ondemand-admission`` answer under the current policy."""
    offered = [c.pod_uid for c in body.candidates]
    if policies.admission == "judge":
        return _judged(state, body, now)
    if policies.admission == "fixed":
        granted = [uid for uid in policies.fixed_granted if uid in offered]
        return {"granted_pod_uids": granted, "withheld": list(policies.fixed_withheld)}
    return {"granted_pod_uids": offered}


def _tier(state: AppState, candidate: VictimCandidate) -> int:
    row = state.reservations.get(candidate.reservation_id)
    return _BOOKING_TIER if row is None else _TIERS.get(row.kind, _BOOKING_TIER)


def _pick(ordered: list[VictimCandidate], need: int) -> list[str]:
    chosen, covered = [], 0
    for candidate in ordered:
        if covered >= need:
            break
        chosen.append(candidate.pod_uid)
        covered += candidate.gpu_count
    return chosen


def select_victims(state: AppState, policies: Policies, body: VictimsBody) -> dict[str, Any]:
    """The ``/preemption-victims`` answer: greedy per class, tiered, seeded."""
    victims: list[str] = []
    for label, need in sorted(body.needed_by_class.items()):
        if need <= 0:
            continue
        pool = [c for c in body.candidates if c.gpu_class == label]
        policies.rng.shuffle(pool)
        if policies.victims == "tiered":
            pool.sort(key=lambda c: _tier(state, c))
        victims.extend(_pick(pool, need))
    return {"victim_pod_uids": victims}

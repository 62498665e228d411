"""The ledger's JSON Patch builders and readers (no side effects).

A claim appends holds with one conditional JSON Patch of ``/status``
(``appended_ops``: conditional on what could make its decision wrong, ``guard_ops``);
a change that only drops, binds or marks holds tests each hold it touches
(``shrink_ops``). ``expected_after`` is the object a claim's patch leaves, so a
following write can be decided on it before the answer; ``tests_hold`` tells a lost
race from any other 422.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from shared import model
from shared.model import GPUReservation
from shared.pointer import resolve


def status_body(raw: dict[str, Any], res: GPUReservation, now: datetime) -> dict[str, Any]:
    """The ``/status`` PUT body: the object as read with ``res``'s ledger as status."""
    body = dict(raw)
    body["status"] = model.status_of(res, now)
    return body


def appended_ops(
    raw: dict[str, Any], res: GPUReservation, entries: Sequence[dict[str, Any]], now: datetime
) -> list[dict[str, Any]]:
    """The JSON Patch of ``/status`` that adds the hold ``entries`` to ``raw``'s ledger
    (``res`` is the result), conditional on what could make the decision wrong.

    When ``raw`` has a uid, a generation and a ledger token, the patch first tests
    all three (``guard_ops``: a failed test is a 422) and replaces the token with
    ``res.token``: it lands on any ledger that only lost, bound or marked holds since
    ``raw``, never on one whose spec changed or to which room-taking writes happened.
    Otherwise it replaces ``metadata.resourceVersion`` with the one read (a
    precondition: 409 when the object changed at all, kubernetes-facts §2) and sets
    the first token. The stored holds are neither sent nor re-encoded. A ``raw``
    without a resourceVersion to fall back on: ``ValueError``. Applied to ``raw``, the
    patch gives the status ``status_body`` would write for ``res``.
    """
    guards = guard_ops(raw)
    ops = guards
    if ops is None:
        version = (raw.get("metadata") or {}).get("resourceVersion")
        if not isinstance(version, str) or not version:
            raise ValueError("the object read has no resourceVersion to write against")
        ops = [{"op": "replace", "path": "/metadata/resourceVersion", "value": version}]
    totals: dict[str, Any] = {"usedGpus": res.used_gpus, "phase": res.facts.phase(now).value}
    if res.token:
        totals[model.LEDGER_TOKEN] = res.token
    status = raw.get("status")
    stored = status.get("holds") if isinstance(status, dict) else None
    fields = [{"op": "add", "path": f"/status/{k}", "value": v} for k, v in totals.items()]
    if isinstance(stored, list) and stored:
        ops += [{"op": "add", "path": "/status/holds/-", "value": e} for e in entries]
        return ops + fields
    if guards is not None:
        # No hold yet, but the token test proves the stored status exists: set the holds
        # in it and leave every other field as stored — what another writer put there
        # since ``raw`` was read (a usage record) is not undone from a cached copy.
        return [*ops, {"op": "add", "path": "/status/holds", "value": [*entries]}, *fields]
    # No hold yet and no token: ``raw`` may be a re-encoding of a parsed view (the
    # reconciler's) whose empty status the stored object lacks, and an ``add`` under a
    # missing parent is refused — so the whole status is written, as a PUT would; the
    # resourceVersion precondition makes it land only on the object as read.
    whole = dict(status) if isinstance(status, dict) else {}
    whole.update(holds=[*entries], **totals)
    return [*ops, {"op": "add", "path": "/status", "value": whole}]


def expected_after(raw: dict[str, Any], ops: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The object a claim's patch (``appended_ops``) leaves when it lands on ``raw``
    unchanged, as far as a following claim needs it (uid, generation, status); None
    when a follower could not be conditional on it (no uid or generation: its new
    resourceVersion is unknown). Shallow: shares ``raw``'s unchanged parts."""
    meta = raw.get("metadata")
    if not isinstance(meta, dict) or "uid" not in meta or "generation" not in meta:
        return None
    status = raw.get("status")
    status = dict(status) if isinstance(status, dict) else {}
    appended = []
    for op in ops:
        path, value = op["path"], op.get("value")
        if op["op"] != "add" or not path.startswith("/status"):
            continue
        if path == "/status":
            status = dict(value) if isinstance(value, dict) else {}
        elif path == "/status/holds/-":
            appended.append(value)
        else:
            status[path.removeprefix("/status/")] = value
    if appended:
        status["holds"] = [*status.get("holds", []), *appended]
    expected = dict(raw, status=status)
    expected["metadata"] = {k: v for k, v in meta.items() if k != "resourceVersion"}
    return expected if guard_ops(expected) is not None else None


def guard_ops(raw: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The ``test`` operations a claim decided on ``raw`` is conditional on: the uid, the
    generation (spec changes) and the ledger token as read; None when ``raw`` lacks one
    of them (a re-encoded view, an old or wiped status): the resourceVersion is then the
    precondition."""
    meta = raw.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    uid, generation = meta.get("uid"), meta.get("generation")
    token = model.token_of(raw.get("status"))
    if not isinstance(uid, str) or not uid or not token:
        return None
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 1:
        return None
    return [
        {"op": "test", "path": "/metadata/uid", "value": uid},
        {"op": "test", "path": "/metadata/generation", "value": generation},
        {"op": "test", "path": f"/status/{model.LEDGER_TOKEN}", "value": token},
    ]


def shrink_ops(
    raw: dict[str, Any], current: GPUReservation, updated: GPUReservation, now: datetime
) -> list[dict[str, Any]] | None:
    """The JSON Patch of ``/status`` that turns ``current`` (parsed from ``raw``) into
    ``updated`` when that only drops holds, rewrites some in place with no more GPUs
    (binds, marks) and leaves the token and the other status fields alone; None for
    any other change (it needs a PUT and a new token).

    Each touched hold is tested whole at the index read (a concurrent drop shifts
    it, a concurrent bind or mark changes it: 422, re-read), then rewritten in place,
    then the dropped ones are removed from the highest index down. Claims only append,
    so they never move an index this tests; no resourceVersion is sent, and the token
    stays: a claim decided before this write is still within the budget after it.
    ``usedGpus`` and ``phase`` are set from this read (display values; see
    docs/developer/architecture.md on how they settle).
    """
    if (updated.status_extra, updated.token) != (current.status_extra, current.token):
        return None
    status = raw.get("status")
    stored = status.get("holds") if isinstance(status, dict) else None
    if not isinstance(stored, list) or len(stored) != len(current.holds):
        return None
    kept = iter(updated.holds)
    nxt = next(kept, None)
    touched: list[int] = []
    rewritten: list[dict[str, Any]] = []
    removed: list[int] = []
    for i, hold in enumerate(current.holds):
        if nxt is not None and nxt.claim == hold.claim:
            if nxt.gpus > hold.gpus:
                return None
            if nxt != hold:
                touched.append(i)
                value = model.hold_to_status(nxt)
                rewritten.append({"op": "replace", "path": f"/status/holds/{i}", "value": value})
            nxt = next(kept, None)
        else:
            touched.append(i)
            removed.append(i)
    if nxt is not None:
        return None  # a hold added, or the holds reordered
    ops = [{"op": "test", "path": f"/status/holds/{i}", "value": stored[i]} for i in touched]
    ops += rewritten
    ops += [{"op": "remove", "path": f"/status/holds/{i}"} for i in reversed(removed)]
    totals = {"usedGpus": updated.used_gpus, "phase": updated.facts.phase(now).value}
    return ops + [{"op": "add", "path": f"/status/{k}", "value": v} for k, v in totals.items()]


def tests_hold(ops: Sequence[dict[str, Any]], obj: dict[str, Any]) -> bool:
    """Whether every ``test`` operation of ``ops`` holds on ``obj`` (RFC 6901 pointers,
    JSON equality): a write whose tests all hold on a re-read failed for some other
    reason than a race."""
    for op in ops:
        if op.get("op") != "test":
            continue
        found, value = resolve(obj, str(op.get("path", "")))
        if not found or not _same_json(value, op.get("value")):
            return False
    return True


def _same_json(a: Any, b: Any) -> bool:
    """JSON equality as a JSON Patch ``test`` judges it (RFC 6902 §4.6): numbers by
    value (``1`` is ``1.0``), but unlike Python's ``==``, ``true`` is not ``1``. The
    webhook's diff (``webhook.patch._same``) is stricter on purpose (docs/developer/webhook.md
    "The patch")."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)

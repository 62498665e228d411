"""The GPU budget ledger of a reservation (DESIGN §3.2, refined: docs/developer/architecture.md
"The ledger protocol").

Every admission under a reservation — by any webhook replica or by the reconciler —
claims GPUs on its ``GPUReservation`` object: read, check that the holds plus the
request fit ``spec.gpuCount``, append a hold with one conditional write of ``/status``.
A lost race (409, or a failed JSON Patch ``test``: 422) means someone wrote in
between: re-read and decide again.

What a claim's write is conditional on is exactly what could make its decision wrong:
the object (``metadata.uid``), its spec (``metadata.generation``: bumped by spec writes
only) and the *ledger token* (``status.ledgerToken``), a random value that every write
which may take room from a claim — adding holds, raising a hold's GPUs, rewriting the
ledger — sets afresh. Writes that only drop, bind or mark holds keep the token: a
decision made before them stays within the budget after them, so a claim does not lose
its race to them, and they (JSON Patches testing the very entries they touch) do not
lose theirs to a claim's append. A ledger without a token (old objects, a wiped status)
is claimed against its resourceVersion, as a PUT would be, and gets its first token.
Because every write that could take room is conditional on what its decision read,
the sum of the holds never exceeds the budget, however many writers race.

Terms:
- *hold*: one entry of ``status.holds`` (``shared.model.Hold``): a claim key, GPUs, when
  it was made, and the pod once known (*bound* once the pod's uid is recorded).
- *used*: the sum of every hold's GPUs.

The package by concern: ``arithmetic`` (verdicts, hold edits, group decisions) and
``rebuild`` (the ledger the live pods imply) are pure; ``patches`` builds and reads
the JSON Patches; ``calls`` and ``cas`` are the I/O shell — ``write_claims`` (one
``ClaimPlan``) and ``amend``, the only functions that write a ledger. Every public name
is importable from here.
"""

from shared.ledger.arithmetic import (
    STOPS,
    Ask,
    Decision,
    LedgerFull,
    Reason,
    add_hold,
    announce_all,
    bind,
    decide_group,
    drop,
    expire,
    fits,
    free,
    new_claim_ids,
    open_for_claims,
    stale_claims,
    used,
    verdict,
    verdict_on,
)
from shared.ledger.calls import LedgerGateway, Stop, Target
from shared.ledger.cas import (
    MAX_ATTEMPTS,
    AmendTerms,
    ClaimPlan,
    ClaimResult,
    ClaimTerms,
    GroupTerms,
    QuietWrite,
    Write,
    WriteLog,
    amend,
    claim,
    claim_group,
    write_claims,
)
from shared.ledger.patches import (
    appended_ops,
    expected_after,
    guard_ops,
    shrink_ops,
    status_body,
    tests_hold,
)
from shared.ledger.rebuild import PodUse, persisted, presumed_announced, rebuild, superseded, unseen

__all__ = [
    "MAX_ATTEMPTS",
    "STOPS",
    "AmendTerms",
    "Ask",
    "ClaimPlan",
    "ClaimResult",
    "ClaimTerms",
    "Decision",
    "GroupTerms",
    "LedgerFull",
    "LedgerGateway",
    "PodUse",
    "QuietWrite",
    "Reason",
    "Stop",
    "Target",
    "Write",
    "WriteLog",
    "add_hold",
    "amend",
    "announce_all",
    "appended_ops",
    "bind",
    "claim",
    "claim_group",
    "decide_group",
    "drop",
    "expected_after",
    "expire",
    "fits",
    "free",
    "guard_ops",
    "new_claim_ids",
    "open_for_claims",
    "persisted",
    "presumed_announced",
    "rebuild",
    "shrink_ops",
    "stale_claims",
    "status_body",
    "superseded",
    "tests_hold",
    "unseen",
    "used",
    "verdict",
    "verdict_on",
    "write_claims",
]

"""The reconciler's settings, read once from the environment at start (DESIGN §7).

Variables the replaced controller had keep their names and its lenient behaviour (an
invalid number falls back to the default with a ``config.invalid`` notice); variables
this project adds are strict: a bad value stops the process with one message listing
every problem. ``docs/operator/configuration.md`` documents each variable.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from certs.apply import Target
from certs.plan import Policy
from certs.settings import FLAG_VARIABLES, read_ensure
from shared.policy.matching import MatchRules
from shared.settings import (
    ClockSettings,
    CommonSettings,
    EnvReader,
    SecretStr,
    SettingsError,
    read_clock,
    read_common,
    read_rules,
)

#: The namespace whose DaemonSet pods the backstop leaves alone by default.
DEFAULT_EXEMPT_NAMESPACE = "kube-system"
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass(frozen=True)
class LeaderSettings:
    """Leader election on a coordination Lease (replaces the seed's singleton lease)."""

    #: LEADER_ELECTION_ENABLED: off means this replica always leads (one replica only).
    enabled: bool
    #: LEADER_ELECTION_LEASE_SECONDS: a standby takes over this long after the last renew.
    lease_s: float
    #: LEADER_ELECTION_RENEW_SECONDS: how often the leader renews and a standby looks.
    renew_s: float


@dataclass(frozen=True)
class QueueSettings:
    """The reserved queue and what it tells waiting pods."""

    #: POD_SCHEDULING_GATE_NAME (seed): the gate the webhook adds to queued pods and
    #: the reconciler removes at admission (None: no gate).
    gate_name: str | None = None
    #: RESERVATION_WAIT_EVENT_ENABLED (seed): WaitingForReservation, ReservationFull,
    #: ReservationTooSmall on queued pods.
    wait_events: bool = True
    #: POD_PROBLEM_EVENT_ENABLED (seed): UnknownGpuClass, NoReservation, AnnotationIgnored.
    problem_events: bool = True
    #: SUPPORT_CONTACT (seed): named at the end of the pod-problem Events.
    support_contact: str | None = None
    #: ONDEMAND_DENIAL_EVENT_REPEAT_MINUTES (seed, >= 0): an unchanged status is restated
    #: at most this often (0: every time).
    repeat: timedelta = timedelta(minutes=30)


@dataclass(frozen=True)
class OnDemandSettings:
    """Just-in-time leases (issue 12); seed variables, lenient like the seed."""

    #: ONDEMAND_LEASE_BUFFER_MINUTES (seed, >= 0): added to the minimum runtime.
    buffer: timedelta = timedelta(minutes=10)
    #: ONDEMAND_DELEGATE_ADMISSION (seed): offer each batch to the app's selection.
    delegate: bool = False
    #: ONDEMAND_DENIAL_EVENT_ENABLED (seed): OnDemandLeaseDenied / OnDemandLeaseRejected.
    denial_events: bool = True
    #: ONDEMAND_PAUSE_EVENT_ENABLED (seed): OnDemandAdmissionPaused.
    pause_events: bool = True
    #: ONDEMAND_MERGE_ENABLED (seed): move a lease's pod onto its owner's booking.
    merge: bool = True
    #: ONDEMAND_OVERCOMMIT_FIT (seed): guard 4 admits what fits instead of pausing.
    overcommit_fit: bool = True


@dataclass(frozen=True)
class UsageSettings:
    """How often usage is counted and written, and how long ended bookings stay."""

    #: USAGE_INTERVAL_SECONDS (1..3600, default 30): the usage pass period (metrics).
    interval_s: float = 30.0
    #: USAGE_CHECKPOINT_SECONDS (1..86400, default 600): an open reservation has its
    #: record rewritten at least this often (bounds what a pod that vanishes while no
    #: leader watches can cost the figures, and what a new leader counts twice).
    checkpoint_s: float = 600.0
    #: USAGE_RETENTION_DAYS (0..365, default 7): an ended reservation's object (and its
    #: usage record) is kept this long after its window stopped, then deleted.
    retention: timedelta = timedelta(days=7)


def usage_from(reader: EnvReader) -> UsageSettings:
    """USAGE_INTERVAL_SECONDS, USAGE_CHECKPOINT_SECONDS, USAGE_RETENTION_DAYS
    (docs/operator/usage.md; strict)."""
    return UsageSettings(
        interval_s=float(reader.integer("USAGE_INTERVAL_SECONDS", 30, 1, 3600)),
        checkpoint_s=float(reader.integer("USAGE_CHECKPOINT_SECONDS", 600, 1, 86400)),
        retention=timedelta(days=reader.integer("USAGE_RETENTION_DAYS", 7, 0, 365)),
    )


@dataclass(frozen=True)
class ReconcilerSettings:
    """Everything the reconciler reads from the environment."""

    common: CommonSettings
    #: RESERVATION_API_URL (required): base URL of the reservation app, no trailing slash.
    api_url: str
    #: RESERVATION_API_KEY (required): a read_write service key.
    api_key: SecretStr
    #: RESERVATION_FETCH_INTERVAL (seed, s, >= 1): period of the full sync.
    fetch_interval_s: int
    #: RESERVATION_LOOKAHEAD_DAYS (seed, >= 1): days after today the sync mirrors.
    lookahead_days: int
    #: HTTP_PORT (seed, 1..65535): health, metrics and the inbound APIs.
    http_port: int
    #: HTTP_HOST: address the HTTP listener binds.
    http_host: str
    #: INBOUND_API_TOKEN (seed): bearer token of the inbound APIs; unset disables them.
    inbound_token: SecretStr | None
    #: POD_NAME (seed, else HOSTNAME, else the host name): this replica's identity.
    identity: str
    #: LEDGER_CLAIM_TTL_SECONDS: an unbound ledger hold older than this is dropped.
    ledger_claim_ttl_s: int
    #: QUEUE_PROCESSOR_INTERVAL (seed, s, >= 1): the backstop tick of ledger upkeep.
    queue_interval_s: int
    #: WATCH_RESYNC_SECONDS: a watched cache relists this often (heals any drift).
    watch_resync_s: float
    #: Matching settings shared with the webhook (REQUIRED_GROUP_LABEL, ...).
    rules: MatchRules
    leader: LeaderSettings
    clock: ClockSettings
    #: POD_ADOPTION_ENABLED (seed, default on): re-link overstaying pods, and the pods of
    #: a booking cancelled mid-window, onto another open booking of their owner.
    adoption_enabled: bool = True
    #: Admission of queued pods and the Events on waiting pods (issue 7).
    queue: QueueSettings = field(default_factory=lambda: QueueSettings())
    #: UNADMITTED_EXEMPT_NAMESPACES (comma-separated, default kube-system): DaemonSet
    #: pods there are out of the proof-of-admission backstop's scope (``reconciler.backstop``).
    exempt_namespaces: frozenset[str] = frozenset({DEFAULT_EXEMPT_NAMESPACE})
    #: NOSHOW_TIMEOUT_MINUTES (seed, >= 0): an unused booking is declared a no-show this
    #: long after its window opens.
    noshow_timeout: timedelta = timedelta(minutes=15)
    #: NOSHOW_GRACE_MINUTES (seed, >= 0): the same for a booking already open when this
    #: leader started, or vacated mid-window (counted from then).
    noshow_grace: timedelta = timedelta(minutes=30)
    #: CAPACITY_CHECK_INTERVAL (seed, s, >= 1): period of the app-vs-physical audit.
    capacity_check_s: int = 3600
    #: CERT_CHECK_INTERVAL and the certs hook Job's CERTS_* names: the leader's
    #: certificate check in self-signed mode (``reconciler.rotation``); ``None``: off.
    rotation: RotationSettings | None = None
    #: Just-in-time on-demand leases (``reconciler.ondemand.leaser``).
    ondemand: OnDemandSettings = field(default_factory=lambda: OnDemandSettings())
    #: Preemption, termination warnings, headroom and overstay reports (issue 13).
    preemption: PreemptionSettings = field(default_factory=lambda: PreemptionSettings())
    #: LEDGER_UNSEEN_HOLD_SECONDS (1..86400, default 10): an unbound ledger hold whose
    #: pod has not appeared this long after the hold was made is released.
    ledger_unseen_hold_s: int = 10
    #: USAGE_*: the usage pass, its checkpoints, the retention of ended ones.
    usage: UsageSettings = field(default_factory=lambda: UsageSettings())

    @property
    def unseen_s(self) -> float:
        """Seconds an unbound hold may wait for its pod: the unseen-hold limit, never
        more than the claim TTL."""
        return float(min(self.ledger_unseen_hold_s, self.ledger_claim_ttl_s))


def load(env: Mapping[str, str] | None = None) -> tuple[ReconcilerSettings, EnvReader]:
    """Read and validate; raises ``SettingsError`` listing every invalid variable.

    The reader is returned too, so the caller can log its seed-style ``notices``.
    """
    reader = EnvReader(os.environ if env is None else env)
    settings = ReconcilerSettings(
        common=read_common(reader),
        api_url=reader.required("RESERVATION_API_URL").rstrip("/"),
        api_key=reader.secret("RESERVATION_API_KEY", required=True) or SecretStr(""),
        fetch_interval_s=reader.integer("RESERVATION_FETCH_INTERVAL", 300, 1, strict=False),
        lookahead_days=reader.integer("RESERVATION_LOOKAHEAD_DAYS", 7, 1, strict=False),
        http_port=reader.integer("HTTP_PORT", 8000, 1, 65535, strict=False),
        http_host=reader.string("HTTP_HOST", "0.0.0.0") or "0.0.0.0",
        inbound_token=reader.secret("INBOUND_API_TOKEN"),
        identity=_identity(reader),
        ledger_claim_ttl_s=reader.integer("LEDGER_CLAIM_TTL_SECONDS", 120, 1, 86400),
        queue_interval_s=reader.integer("QUEUE_PROCESSOR_INTERVAL", 300, 1, strict=False),
        watch_resync_s=reader.number("WATCH_RESYNC_SECONDS", 600.0, minimum=1.0),
        rules=read_rules(reader),
        leader=_leader(reader),
        clock=read_clock(reader),
        adoption_enabled=reader.boolean("POD_ADOPTION_ENABLED", True, strict=False),
        queue=queue_from(reader),
        noshow_timeout=timedelta(
            minutes=reader.integer("NOSHOW_TIMEOUT_MINUTES", 15, 0, strict=False)
        ),
        noshow_grace=timedelta(minutes=reader.integer("NOSHOW_GRACE_MINUTES", 30, 0, strict=False)),
        capacity_check_s=reader.integer("CAPACITY_CHECK_INTERVAL", 3600, 1, strict=False),
        rotation=rotation_from(reader),
        ondemand=ondemand_from(reader),
        preemption=preemption_from(reader),
        exempt_namespaces=_namespaces(reader, "UNADMITTED_EXEMPT_NAMESPACES"),
        ledger_unseen_hold_s=reader.integer("LEDGER_UNSEEN_HOLD_SECONDS", 10, 1, 86400),
        usage=usage_from(reader),
    )
    reader.check()
    return settings, reader


def queue_from(reader: EnvReader) -> QueueSettings:
    """The seed's queue and Event variables (lenient, like the seed)."""
    repeat = reader.integer("ONDEMAND_DENIAL_EVENT_REPEAT_MINUTES", 30, 0, strict=False)
    return QueueSettings(
        gate_name=reader.string("POD_SCHEDULING_GATE_NAME") or None,
        wait_events=reader.boolean("RESERVATION_WAIT_EVENT_ENABLED", True, strict=False),
        problem_events=reader.boolean("POD_PROBLEM_EVENT_ENABLED", True, strict=False),
        support_contact=reader.string("SUPPORT_CONTACT") or None,
        repeat=timedelta(minutes=repeat),
    )


def ondemand_from(reader: EnvReader) -> OnDemandSettings:
    """The seed's on-demand variables (lenient, like the seed)."""
    buffer = reader.integer("ONDEMAND_LEASE_BUFFER_MINUTES", 10, 0, strict=False)
    return OnDemandSettings(
        buffer=timedelta(minutes=buffer),
        delegate=reader.boolean("ONDEMAND_DELEGATE_ADMISSION", False, strict=False),
        denial_events=reader.boolean("ONDEMAND_DENIAL_EVENT_ENABLED", True, strict=False),
        pause_events=reader.boolean("ONDEMAND_PAUSE_EVENT_ENABLED", True, strict=False),
        merge=reader.boolean("ONDEMAND_MERGE_ENABLED", True, strict=False),
        overcommit_fit=reader.boolean("ONDEMAND_OVERCOMMIT_FIT", True, strict=False),
    )


def _namespaces(reader: EnvReader, name: str) -> frozenset[str]:
    """A comma-separated list of namespace names (blanks dropped; each must be a DNS
    label, else a problem is reported); unset or empty means the default."""
    text = reader.string(name, DEFAULT_EXEMPT_NAMESPACE) or ""
    names = frozenset(n.strip() for n in text.split(",") if n.strip())
    bad = sorted(n for n in names if not _DNS_LABEL.fullmatch(n))
    if bad:
        reader.problems.append(f"{name}: not namespace names: {', '.join(bad)}")
    return names


def _identity(reader: EnvReader) -> str:
    return reader.string("POD_NAME") or reader.string("HOSTNAME") or socket.gethostname()


def _leader(reader: EnvReader) -> LeaderSettings:
    lease_s = reader.number("LEADER_ELECTION_LEASE_SECONDS", 15.0, minimum=1.0)
    renew_s = reader.number("LEADER_ELECTION_RENEW_SECONDS", 5.0, minimum=0.1)
    if renew_s >= lease_s:
        reader.problems.append(
            f"LEADER_ELECTION_RENEW_SECONDS={renew_s} must be below "
            f"LEADER_ELECTION_LEASE_SECONDS={lease_s}"
        )
    return LeaderSettings(reader.boolean("LEADER_ELECTION_ENABLED", True), lease_s, renew_s)


@dataclass(frozen=True)
class PreemptionSettings:
    """The seed's preemption, warning, headroom and overstay-report variables."""

    #: PREEMPTION_LEAD_MINUTES (>= 0): how long before a booking starts its GPUs are
    #: reclaimed (phase A), and how long after it phase B still runs.
    lead: timedelta = timedelta(minutes=15)
    #: PREEMPTION_CHECK_INTERVAL (s, >= 1): the sweep's backstop period.
    interval_s: int = 60
    #: PREEMPTION_DELEGATE_SELECTION: the app chooses the victims (contract §2.8).
    delegate: bool = True
    #: TERMINATION_WARNING_ENABLED: annotate (and tell) pods at risk.
    warnings: bool = True
    #: TERMINATION_WARNING_LEAD_MINUTES (>= 0): how far ahead pods are warned.
    warning_lead: timedelta = timedelta(minutes=30)
    #: HEADROOM_TARGET_PERCENT (0..100): share of each class kept free (0: off).
    headroom_percent: int = 0
    #: HEADROOM_NOTICE_MINUTES (>= 0): warning time before a headroom kill.
    headroom_notice: timedelta = timedelta(minutes=15)
    #: HEADROOM_CHECK_INTERVAL (s, >= 1): headroom kills at most this often.
    headroom_interval_s: int = 600
    #: OVERSTAY_REPORT_ENABLED: report a preempted overstay to the app (§2.10).
    overstay_report: bool = False
    #: EVICTION_GRACE_SECONDS (1..86400, default 60): the longest termination grace a
    #: pod gets when the reconciler deletes it (preemption, eviction, the backstop) or
    #: finds it terminating on a reserved node (``reconciler.backstop.lingering``).
    grace_s: int = 60


def preemption_from(reader: EnvReader) -> PreemptionSettings:
    """The seed's variables, read leniently like the seed (bad value → default + notice),
    and EVICTION_GRACE_SECONDS (ours: strict)."""
    minutes = timedelta(minutes=1)
    return PreemptionSettings(
        lead=minutes * reader.integer("PREEMPTION_LEAD_MINUTES", 15, 0, strict=False),
        interval_s=reader.integer("PREEMPTION_CHECK_INTERVAL", 60, 1, strict=False),
        delegate=reader.boolean("PREEMPTION_DELEGATE_SELECTION", True, strict=False),
        warnings=reader.boolean("TERMINATION_WARNING_ENABLED", True, strict=False),
        warning_lead=minutes
        * reader.integer("TERMINATION_WARNING_LEAD_MINUTES", 30, 0, strict=False),
        headroom_percent=reader.integer("HEADROOM_TARGET_PERCENT", 0, 0, 100, strict=False),
        headroom_notice=minutes * reader.integer("HEADROOM_NOTICE_MINUTES", 15, 0, strict=False),
        headroom_interval_s=reader.integer("HEADROOM_CHECK_INTERVAL", 600, 1, strict=False),
        overstay_report=reader.boolean("OVERSTAY_REPORT_ENABLED", False, strict=False),
        grace_s=reader.integer("EVICTION_GRACE_SECONDS", 60, 1, 86400),
    )


INTERVAL_VARIABLE = "CERT_CHECK_INTERVAL"


@dataclass(frozen=True)
class RotationSettings:
    """Where the certificates are and how often to look at them."""

    interval_s: float
    target: Target
    policy: Policy


def rotation_from(reader: EnvReader) -> RotationSettings | None:
    """``None`` when the check is off; problems of the names join the reader's."""
    interval = reader.number(INTERVAL_VARIABLE, 0.0, minimum=0.0)
    if interval <= 0:
        return None
    names = {v: reader.raw(v) for v in FLAG_VARIABLES.values()}
    try:
        certs = read_ensure({k: v for k, v in names.items() if v is not None})
    except SettingsError as exc:
        reader.problems.extend(f"{INTERVAL_VARIABLE} is set: {p}" for p in exc.problems)
        return None
    return RotationSettings(interval, certs.target, certs.policy)

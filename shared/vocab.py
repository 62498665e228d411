"""The project's vocabulary: every key, name and reason that crosses a process boundary.

Pod annotations and labels, taint keys, Event reasons, the CRD's names, resource names
of the Kubernetes API we use and the sandbox's own annotation are defined here once.
The ``galends/*`` keys are kept byte-for-byte from the controller we replace: in-pod
widgets and the reservation app read them. A test (``tests/unit/test_vocab.py``) fails
when one of these strings appears as a literal anywhere else in the code, so a rename
here is a rename everywhere.
"""

from __future__ import annotations

from typing import Final

# --- Taints, labels and the toleration we grant -------------------------------------

#: Taint key on reserved GPU nodes; value is the class label, effect NoSchedule.
RESERVATION_TAINT_KEY: Final = "gpu-class-reservation"
#: Taint key (and pod label key) marking a node/pod as belonging to a GPU class.
GPU_CLASS_LABEL: Final = "gpu-class"
#: The extended resource a pod requests GPUs with, and a node advertises them under.
GPU_RESOURCE: Final = "nvidia.com/gpu"
#: The only taint effect the reservation system uses.
TAINT_EFFECT_NO_SCHEDULE: Final = "NoSchedule"
#: Annotation the kubelet puts on the API copy (mirror pod) of a static pod.
MIRROR_POD_ANNOTATION: Final = "kubernetes.io/config.mirror"
#: Label every namespace carries with its own name (set by the apiserver).
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"
#: Annotation ranking a ReplicaSet's pods for scale-down: the lowest cost goes first.
POD_DELETION_COST: Final = "controller.kubernetes.io/pod-deletion-cost"

# --- Pod annotations written by the controller (controller-owned) --------------------

ANNOTATION_PREFIX: Final = "galends/"
#: ``res-<id>``: the reservation the pod was admitted under.
BOOKING_REFERENCE: Final = "galends/booking-reference"
#: The ledger claim id (uuid) of the hold this pod's admission made.
ADMISSION_CLAIM: Final = "galends/admission-claim"
#: Runtime guarantee length in seconds when it was recorded (0 for best-effort).
POD_RUNTIME_LIMIT_SECONDS: Final = "galends/pod-runtime-limit-seconds"
#: The guarantee as an absolute UTC instant; refreshed while in guarantee.
GUARANTEED_UNTIL: Final = "galends/guaranteed-until"
#: ``guaranteed`` or ``overstay``.
GUARANTEE_STATUS: Final = "galends/guarantee-status"
#: ``booking``, ``on_demand`` or ``best_effort``.
RESERVATION_KIND: Final = "galends/reservation-kind"
#: The reservation's own window start (UTC).
RESERVATION_START: Final = "galends/reservation-start"
#: The reservation's own window end (UTC).
RESERVATION_END: Final = "galends/reservation-end"
#: GPUs the reservation holds.
RESERVATION_GPU_COUNT: Final = "galends/reservation-gpu-count"
#: The GPU class's display name (``H100``), not its label value.
GPU_CLASS_NAME: Final = "galends/gpu-class-name"
#: When the pod was first admitted (UTC); not rewritten on a re-link.
ADMITTED_AT: Final = "galends/admitted-at"
#: Projected preemption instant (UTC) while the pod is at risk.
TERMINATION_WARNING_AT: Final = "galends/termination-warning-at"
#: Preemption risk in (0, 1], two decimals.
TERMINATION_WARNING_RISK: Final = "galends/termination-warning-risk"
#: Human-readable warning prose, in the display zone.
TERMINATION_WARNING_MESSAGE: Final = "galends/termination-warning-message"

#: Every annotation only the controller may write; a user-supplied one is stripped at
#: CREATE and a change to one is denied at UPDATE.
CONTROLLER_OWNED_ANNOTATIONS: Final = frozenset(
    {
        BOOKING_REFERENCE,
        ADMISSION_CLAIM,
        POD_RUNTIME_LIMIT_SECONDS,
        GUARANTEED_UNTIL,
        GUARANTEE_STATUS,
        RESERVATION_KIND,
        RESERVATION_START,
        RESERVATION_END,
        RESERVATION_GPU_COUNT,
        GPU_CLASS_NAME,
        ADMITTED_AT,
        TERMINATION_WARNING_AT,
        TERMINATION_WARNING_RISK,
        TERMINATION_WARNING_MESSAGE,
    }
)

# --- Pod annotations the user sets (consumed, never written) ------------------------

#: Minimum runtime in seconds a JIT lease must cover.
MINIMUM_RUNTIME_SECONDS: Final = "galends/minimum-runtime-seconds"
#: Usage group a JIT lease is created under when REQUIRED_GROUP_LABEL is unset.
USAGE_GROUP: Final = "galends/usage-group"
#: ``none`` asks for best-effort admission (BEST_EFFORT_ENABLED).
RUNTIME_GUARANTEE: Final = "galends/runtime-guarantee"

# --- Node annotation -----------------------------------------------------------------

#: Whole number >= 0 replacing a node's allocatable GPUs in every capacity figure.
FORCE_NODE_CAPACITY: Final = "galends/force-node-capacity"

# --- Annotation values -----------------------------------------------------------------

#: ``galends/guarantee-status`` while the pod is inside its runtime guarantee.
GUARANTEE_STATUS_GUARANTEED: Final = "guaranteed"
#: ``galends/guarantee-status`` once the pod runs past its guarantee.
GUARANTEE_STATUS_OVERSTAY: Final = "overstay"
#: ``galends/runtime-guarantee`` value asking for best-effort admission.
RUNTIME_GUARANTEE_NONE: Final = "none"
#: Prefix of ``galends/booking-reference`` values: ``res-<id>``; also the
#: GPUReservation object name prefix.
RESERVATION_REF_PREFIX: Final = "res-"

# --- Event reasons (R40: Normal unless listed in WARNING_REASONS) --------------------

REASON_RUNTIME_GUARANTEED: Final = "RuntimeGuaranteed"
REASON_BEST_EFFORT_ADMITTED: Final = "BestEffortAdmitted"
REASON_OVERSTAY_RELINKED: Final = "OverstayRelinked"
REASON_RESERVATION_RELINKED: Final = "ReservationRelinked"
REASON_PREEMPTED: Final = "Preempted"
REASON_RESERVATION_CANCELLED: Final = "ReservationCancelled"
REASON_RESERVATION_REASSIGNED: Final = "ReservationReassigned"
REASON_WAITING_FOR_RESERVATION: Final = "WaitingForReservation"
REASON_WAITING_FOR_NODE: Final = "WaitingForNode"
REASON_ONDEMAND_LEASE_DENIED: Final = "OnDemandLeaseDenied"
REASON_ONDEMAND_LEASE_REJECTED: Final = "OnDemandLeaseRejected"
REASON_ONDEMAND_ADMISSION_PAUSED: Final = "OnDemandAdmissionPaused"
REASON_UNKNOWN_GPU_CLASS: Final = "UnknownGpuClass"
REASON_NO_RESERVATION: Final = "NoReservation"
REASON_ANNOTATION_IGNORED: Final = "AnnotationIgnored"
REASON_RESERVATION_FULL: Final = "ReservationFull"
REASON_RESERVATION_TOO_SMALL: Final = "ReservationTooSmall"
REASON_NO_MATCHING_NODE: Final = "NoMatchingNode"
#: A JIT candidate's lease request failed for a reservation-app outage (Normal: it is
#: requested again as soon as the app answers).
REASON_ONDEMAND_LEASE_DELAYED: Final = "OnDemandLeaseDelayed"
#: Eviction of a pod tolerating the reservation taint without a ledger hold.
REASON_UNADMITTED_TOLERATION: Final = "UnadmittedToleration"
#: A pod past its guarantee may be preempted soon (termination warning, R33).
REASON_TERMINATION_WARNING: Final = "TerminationWarning"
#: A pod terminating on a reserved node with a grace longer than the reconciler allows
#: (EVICTION_GRACE_SECONDS) was deleted again with the allowed grace.
REASON_TERMINATION_GRACE_SHORTENED: Final = "TerminationGraceShortened"

#: Reasons whose Events have type Warning; every other reason is Normal.
WARNING_REASONS: Final = frozenset(
    {
        REASON_ONDEMAND_LEASE_DENIED,
        REASON_ONDEMAND_LEASE_REJECTED,
        REASON_ONDEMAND_ADMISSION_PAUSED,
        REASON_UNKNOWN_GPU_CLASS,
        REASON_NO_RESERVATION,
        REASON_ANNOTATION_IGNORED,
        REASON_RESERVATION_FULL,
        REASON_RESERVATION_TOO_SMALL,
        REASON_NO_MATCHING_NODE,
        REASON_UNADMITTED_TOLERATION,
        REASON_TERMINATION_WARNING,
        REASON_TERMINATION_GRACE_SHORTENED,
    }
)

# --- Events on the controller's leader Lease (for operators; never on pods) ----------

#: Warning, per class, at each capacity audit that finds the app counting more GPUs
#: than the cluster has (on-demand admissions for the class are held).
AUDIT_REASON_OVERCOMMITTED: Final = "CapacityOvercommitted"
#: Normal, per class, at the first audit after an overcommit that finds it cleared.
AUDIT_REASON_RESTORED: Final = "CapacityRestored"

#: The product's name: ``reportingComponent`` of every Event we write, the default
#: controller namespace (chart and sandbox) and the prefix of our object names.
PRODUCT_NAME: Final = "gpu-reservation"

# --- The GPUReservation custom resource ----------------------------------------------

CRD_GROUP: Final = "galends.io"
CRD_VERSION: Final = "v1alpha1"
CRD_KIND: Final = "GPUReservation"
CRD_LIST_KIND: Final = "GPUReservationList"
CRD_PLURAL: Final = "gpureservations"
CRD_SINGULAR: Final = "gpureservation"
CRD_SHORT_NAME: Final = "gpures"
#: ``<plural>.<group>``, the CRD object's own name.
CRD_NAME: Final = "gpureservations.galends.io"

# --- Leader election ----------------------------------------------------------------

#: Name of the coordination Lease the reconciler replicas elect a leader on.
LEADER_LEASE_NAME: Final = "gpu-reservation-reconciler"
#: Annotation the leader keeps on that Lease (in its own renew writes): the reservation
#: app's health as it last saw it, ``ok|unreachable since <UTC>`` (docs/user/explain.md).
APP_HEALTH_ANNOTATION: Final = "galends.io/app-health"

# --- Sandbox-only vocabulary ----------------------------------------------------------

#: Pod annotation read by the sandbox's kubelet: seconds the pod runs before it
#: finishes with Succeeded (sandbox clock).
SANDBOX_RUN_SECONDS: Final = "sandbox.galends.io/run-seconds"
#: The scheduling gate the sandbox runs the webhook and reconciler with
#: (``POD_SCHEDULING_GATE_NAME``): queued pods stay SchedulingGated until admitted.
SANDBOX_SCHEDULING_GATE: Final = "gpu-reservation.galends.io/queued"
#: Taint of the sandbox's system node, where the chart's pods run (the scenario's
#: nodes are all GPU nodes); only our release tolerates it (sandbox/values.yaml).
SANDBOX_SYSTEM_TAINT: Final = "sandbox.galends.io/system"

"""Pure policy shared by the webhook and the reconciler.

- ``gpus``: a pod's effective GPU request, as Kubernetes computes it.
- ``tolerations``: does a toleration tolerate the reservation taint; the one we grant.
- ``matching``: pod profile (owner, class, group, usage group) and the R6 predicates.
- ``windows``: window arithmetic and the chained runtime guarantee (R8–R10).
- ``routing``: admit / queue / JIT / nothing, and the choice among bookings (R4, R6).
- ``annotations``: the one writer of the admission annotation set.

No module here performs I/O or reads the clock: "now" is always a parameter.
"""

from collections.abc import Mapping

#: ``isinstance(x, MAP)`` means ``isinstance(x, Mapping)``, with a plain dict (every
#: parsed JSON object) recognised before the ABC's check, which costs ~10x more — the
#: pod readers on the webhook's hot path make ~20 such checks per request.
MAP = (dict, Mapping)

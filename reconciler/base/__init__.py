"""The ground every room of the reconciler stands on; it imports no room above it.

What the leader knows and how it speaks: the watched caches of pods, nodes and
GPUReservations with their indexes (``caches``, ``pods``, ``inventory``; R1–R3, R36,
R44), the ledger upkeep that keeps every hold true to the live pods (``upkeep``,
DESIGN §3.2; its loop is ``ledger-upkeep``), the one Event writer and its throttle
(``events``, ``throttle``; R39, R40), the writer of GPUReservation objects
(``mirroring``), the reservation app's health (``apphealth``), the settings
(DESIGN §7), the one metrics module, the guarded tasks, and the Protocols of the
Kubernetes calls (``kube``).
"""

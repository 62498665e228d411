"""The webhook's claim path: how a replica claims budget on a reservation's ledger.

- ``engine``: ``ClaimEngine``, the few calls the handler makes (``claim``,
  ``dry_run``); it groups concurrent claims per reservation and pipelines their writes.
- ``lanes``: a reservation's queue and writes in flight, and its ``Phase``.
- ``journal``: our writes by stage (sent → landed → seen), which the cache joins to
  every state of the server it meets.
- ``entries``: a cached reservation and the pure steps that put our writes on it.

Calls go one way: handler → engine → ledger, journal and cache; cache → journal.
"""

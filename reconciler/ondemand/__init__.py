"""Just-in-time on-demand leases on the leader (R5, R15–R25, R38): loop ``ondemand-leases``.

``leaser``: the loop, a batch in phases — read, due, vet, tell, report, select, ask,
announce, keep. ``vetting``: the pure guards' inputs and the preflight of a batch.
``asking``: the app calls and the admission under a grant. ``leases``: merge,
teardown and orphans of granted leases (R22, R23, R25). ``status``: the pod statuses
and the gate warning.
"""

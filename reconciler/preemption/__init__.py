"""Making room for bookings on the leader (R30–R34, R41, R42): loop ``preemption-sweep``.

``sweep``: the sweep (plan, warn, kill), headroom and the warnings' schedule.
``plan``: the caches seen through ``shared.policy.preemption``. ``warn``: termination
warnings on pods (R33). ``kills``: executing the sweep's decision. ``overstay``: the
overstay report to the app (R42). ``forecast``: ``GET /api/forecast/preemption`` (R41),
served by every replica.
"""

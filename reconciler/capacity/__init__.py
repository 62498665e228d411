"""Capacity and bookings left unused, on the leader.

``audit``: the capacity audit (R37), loop ``capacity-audit``: physical GPUs against
active bookings, and guard 4's deficits. ``noshow``: declaring, cancelling and
recording no-shows (R14), loop ``no-show``.
"""

"""The mirror: one GPUReservation object per reservation of the app (R23, R29).

``sync``: the poll of the app, loop ``reservation-sync`` (every
``RESERVATION_FETCH_INTERVAL``), which also keeps the app's health. ``push``: ``POST
/api/reservations/push``, served by every replica. Both write through
``reconciler.base.mirroring``.
"""

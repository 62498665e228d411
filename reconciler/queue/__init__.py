"""The reserved path on the leader: admission at window open, evictions mid-window.

``admit``: the reserved queue's loop ``reserved-queue`` (R4, R11–R13), a pass in
phases — select, route, sort, gauge, admit, prune. ``evict``: cancellation and
owner-change evictions, loop ``evictions`` (R27, R28), with ``Upholders``, which runs
the guarantee and re-link loops of ``reconciler.admission`` beside it.
"""

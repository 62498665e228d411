"""What the reserved queue and the on-demand path share: a pod's tie to its booking.

Made: the waiting pods and the admission patch (``pending``), the claim-and-patch step
both paths take (``step``; R11, R20), telling a waiting pod why it waits (``waiting``;
R39) and announcing an admission once (``announce``). Kept: guarantees live on
admitted pods (``guarantees``; R9, R10, R35), re-links onto another booking of the
owner (``adoption``, ``relink``; R25, R26, R40). Undone: the evicting pass the
evictor and the backstop share (``evicting``; R27, R28). Its loops are
``guarantees`` and ``relink``, run by ``reconciler.queue.evict.Upholders``.
"""

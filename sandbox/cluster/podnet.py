"""The pod network: a block of loopback addresses of one sandbox's own.

Pods get ``127.<block>.<x>.<y>`` (``y`` from 2). Several sandboxes on one machine (the
test suite runs two at once) must not hand out the same address, or two processes would
fight for one ``ip:port``. A sandbox claims its block by listening on
``127.<block>.0.1:10250`` (the kubelet's port; the address is never a pod's) for as long
as it runs: a block whose claim is held elsewhere is skipped.
"""

from __future__ import annotations

import contextlib
import random
import socket

#: The port whose listener on ``127.<block>.0.1`` claims a block.
CLAIM_PORT = 10250
#: Blocks are 2..254 (127.0 is the host's, 127.1 the simulated pods' of old).
FIRST_BLOCK, LAST_BLOCK = 2, 254


def address(block: int, index: int) -> str:
    """The ``index``-th pod address of ``block``: .0.2, .0.3, … (62,500 of them)."""
    return f"127.{block}.{(index // 250) % 250}.{index % 250 + 2}"


class Block:
    """A claimed block of pod addresses; ``close`` gives it back."""

    def __init__(self, rng: random.Random | None = None) -> None:
        candidates = list(range(FIRST_BLOCK, LAST_BLOCK + 1))
        (rng or random.Random()).shuffle(candidates)
        for block in candidates:
            claim = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                claim.bind((f"127.{block}.0.1", CLAIM_PORT))
                claim.listen(1)
            except OSError:
                claim.close()
                continue
            self.number, self._claim = block, claim
            return
        raise RuntimeError("no free block of pod addresses on 127.0.0.0/8")

    def address(self, index: int) -> str:
        return address(self.number, index)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._claim.close()

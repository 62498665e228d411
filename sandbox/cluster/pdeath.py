"""Children that die with the sandbox: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``.

The process kubelet starts each container in a session of its own (a Ctrl-C in the
terminal is the sandbox's to handle, not every child's), so nothing in the process
group reaches them when the sandbox itself is killed hard (SIGKILL of ``python -m
sandbox`` or of a pytest worker): without more, the webhook and reconciler would run
on, holding their ports. On Linux each child asks the kernel for SIGKILL when its
parent goes away, in the child between fork and exec (``preexec_fn``).

The kernel's "parent" here is the *thread* that forked, not the process: the signal
comes when that thread exits. The runtime spawns from its event loop's thread, which
lives as long as the sandbox (a sandbox on a background loop keeps that loop's thread
until it is stopped, and stopping it stops every child first); a spawn from a
short-lived worker thread would kill the child when that thread ended.

A parent that dies between the fork and the ``prctl`` would be missed, so the child
then compares its parent with the one it was forked from and exits if they differ.
Elsewhere than Linux there is no such call: ``preexec`` is None and children may
outlive a hard-killed sandbox.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import signal
import sys
from collections.abc import Callable

#: ``<linux/prctl.h>``.
PR_SET_PDEATHSIG = 1


def preexec() -> Callable[[], None] | None:
    """The ``preexec_fn`` that ties a child's life to this thread (None off Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    libc = _libc()
    parent = os.getpid()

    def tie() -> None:
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            os._exit(126)  # the kubelet records the failed start with this code
        if os.getppid() != parent:
            os._exit(0)  # the sandbox died before the tie was made

    return tie


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)

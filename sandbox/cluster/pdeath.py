"""Children that die with the sandbox: ``setpriv --pdeathsig KILL``.

The process kubelet starts each container in a session of its own (a Ctrl-C in the
terminal is the sandbox's to handle, not every child's), so nothing in the process
group reaches them when the sandbox itself is killed hard (SIGKILL of ``python -m
sandbox`` or of a pytest worker): without more, the webhook and reconciler would run
on, holding their ports. On Linux each child asks the kernel for SIGKILL when its
parent goes away (``prctl(PR_SET_PDEATHSIG)``), which survives the ``exec`` of the
container's command.

The call is made by util-linux's ``setpriv`` (Essential in Debian), which sets it and
execs the command: the pid the kubelet watches is the command's own. Not a
``preexec_fn``: Python runs that in the child between fork and exec, which is not safe
while other threads run (the sandbox's have locks a forked child can find held).

The kernel's "parent" is the *thread* that forked, not the process: the signal comes
when that thread exits. The runtime spawns from its event loop's thread, which lives as
long as the sandbox (stopping a sandbox stops every child first); a spawn from a
short-lived worker thread would kill the child when that thread ended. A sandbox killed
in the milliseconds between a spawn and ``setpriv``'s call leaves that one child untied.
Without ``setpriv`` (not Linux) the command runs untied and may outlive a hard-killed
sandbox.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence


def tied(command: Sequence[str], path: str | None = None) -> list[str]:
    """``command`` run so that it dies with the thread spawning it (unchanged where the
    platform has no way to). A program that cannot be run raises ``FileNotFoundError``
    or ``PermissionError`` here, as a direct spawn would, not later inside ``setpriv``:
    the kubelet tells a container that cannot start from one that exits."""
    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    if setpriv is None or not command:
        return list(command)
    program = command[0]
    if os.sep in program:
        if not os.path.isfile(program):
            raise FileNotFoundError(2, "No such file or directory", program)
        if not os.access(program, os.X_OK):
            raise PermissionError(13, "Permission denied", program)
    elif shutil.which(program, path=path) is None:
        raise FileNotFoundError(2, "No such file or directory", program)
    return [setpriv, "--pdeathsig", "KILL", "--", *command]

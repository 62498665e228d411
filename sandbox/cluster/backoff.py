"""The kubelet's restart back-off of a container. No side effects.

Read from the kubelet (``kuberuntime_manager.doBackOff`` over client-go's
``flowcontrol.Backoff``, initial 10 s, ``MaxContainerBackOff`` 300 s): after an exit
at ``finished``, a container whose back-off entry is live waits until ``finished +
delay``, then restarts and the entry's delay doubles (capped at 300 s); without an entry
(the first exit) it restarts at once and the entry starts at 10 s. An entry expires when
the exit comes more than twice the cap (600 s, ten minutes) after the entry's last
update: a container that ran ten minutes starts over at once.
"""

from __future__ import annotations

from dataclasses import dataclass

INITIAL_S = 10.0
MAX_S = 300.0


@dataclass(frozen=True)
class Entry:
    """A container's back-off: the current delay, and when it was last advanced."""

    delay_s: float
    updated_at: float


def restart_wait(entry: Entry | None, finished_at: float, now: float) -> float:
    """Seconds from ``now`` until the container may restart."""
    if entry is None or finished_at - entry.updated_at > 2 * MAX_S:
        return 0.0
    return max(0.0, finished_at + entry.delay_s - now)


def advanced(entry: Entry | None, now: float) -> Entry:
    """The entry after a restart at ``now`` (``flowcontrol.Backoff.Next``)."""
    if entry is None or now - entry.updated_at > 2 * MAX_S:
        return Entry(INITIAL_S, now)
    return Entry(min(entry.delay_s * 2, MAX_S), now)

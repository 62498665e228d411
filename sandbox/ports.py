"""Loopback ports for the sandbox's servers and child processes.

A port handed to a child process is free only when it is chosen; another process may
take it before the child binds. The kernel's ``bind(0)`` picks from the ephemeral range,
where every outgoing connection on the machine also takes its local port, and two test
workers asking at once are handed neighbouring ports — so under load a child could find
its port taken (uvicorn exits 3). Ports are instead drawn at random from below the
ephemeral range (Linux: 32768–60999), where outgoing connections never land.
"""

from __future__ import annotations

import random
import socket

#: Below Linux's default ephemeral range; above the registered services people run.
_LOW, _HIGH = 20000, 32767


def free_port(host: str = "127.0.0.1") -> int:
    """A loopback port that is free now, drawn at random outside the ephemeral range."""
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randint(_LOW, _HIGH)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        fallback: int = sock.getsockname()[1]
        return fallback

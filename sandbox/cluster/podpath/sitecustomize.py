"""Loaded first by every process the sandbox kubelet runs (its directory leads
PYTHONPATH): a bind to the wildcard address lands on the pod's own address.

On a cluster each pod has a network namespace, so three replicas may all bind
``0.0.0.0:8443``. The sandbox's pods share the machine's network; each has a loopback
address of its own (``SANDBOX_POD_IP``, its ``status.podIP``), and this maps a bind to
``''``/``0.0.0.0`` onto it (and ``::`` onto its IPv4-mapped form, dual-stack). Nothing
else is changed, and nothing here knows the program it runs in.
"""

from __future__ import annotations

import os
import socket
from typing import Any

_POD_IP = os.environ.get("SANDBOX_POD_IP", "")


def _pod_address(sock: socket.socket, address: Any) -> Any:
    if not isinstance(address, tuple) or not address:
        return address
    if sock.family == socket.AF_INET and address[0] in ("", "0.0.0.0"):
        return (_POD_IP, *address[1:])
    if sock.family == socket.AF_INET6 and address[0] in ("", "::"):
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        return (f"::ffff:{_POD_IP}", *address[1:])
    return address


if _POD_IP:
    _bind = socket.socket.bind

    def _bind_on_pod(self: socket.socket, address: Any) -> None:
        _bind(self, _pod_address(self, address))

    socket.socket.bind = _bind_on_pod  # type: ignore[method-assign, assignment]

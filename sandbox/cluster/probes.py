"""Container probes as the kubelet's prober runs them.

``Probe`` holds a probe's timings with the API's defaults (period 10 s, timeout 1 s,
success 1, failure 3, no initial delay). ``check`` runs one ``httpGet`` (success is a
status in [200, 400); HTTPS is not verified, as the kubelet does not), ``tcpSocket``
(a connection opens) or ``exec`` (exit 0) against the pod IP. A named port that the
container does not declare is an error result, never an exception: the kubelet reports
it on the ``Unhealthy`` Event and the probe keeps failing. ``Counter`` turns results
into the probe's state: it flips after ``successThreshold``/``failureThreshold``
consecutive results (no side effects).

An ``httpGet`` is sent as the kubelet's prober sends it — a connection of its own,
``Connection: close``, the ``kube-probe`` User-Agent and ``Accept: */*`` unless the
probe's ``httpHeaders`` name others (names match whatever their case), its ``Host``
as the request's host — and judged by the answer's status line alone, whatever frames
the body (an HTTP/1.0 server ends it by closing). The probes run on the emulator's
event loop: a bare stream with one shared unverified TLS context costs it 0.25 ms a
probe, where building an httpx client (and its TLS context) per probe would cost 2.5.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import ssl
from dataclasses import dataclass
from typing import Any

from sandbox.kube.admission.http1 import TransportError, serialize

Obj = dict[str, Any]


@dataclass(frozen=True)
class Probe:
    """One probe of a container spec."""

    spec: Obj
    initial_delay_s: float
    period_s: float
    timeout_s: float
    success_threshold: int
    failure_threshold: int

    @classmethod
    def of(cls, spec: Obj) -> Probe:
        def number(key: str, default: int, least: int) -> int:
            value = spec.get(key, default)
            ok = isinstance(value, int) and not isinstance(value, bool)
            return max(value, least) if ok else default

        return cls(
            spec,
            number("initialDelaySeconds", 0, 0),
            number("periodSeconds", 10, 1),
            number("timeoutSeconds", 1, 1),
            number("successThreshold", 1, 1),
            number("failureThreshold", 3, 1),
        )


@dataclass
class Counter:
    """Consecutive results and the state they make."""

    state: bool
    success_threshold: int
    failure_threshold: int
    _run: int = 0
    _last: bool | None = None

    def add(self, ok: bool) -> bool:
        """Record a result; whether the state changed."""
        self._run = self._run + 1 if ok == self._last else 1
        self._last = ok
        wanted = self.success_threshold if ok else self.failure_threshold
        if ok != self.state and self._run >= wanted:
            self.state = ok
            return True
        return False


def port_of(value: Any, container: Obj) -> int:
    """A probe's port: a number, or the name of one of the container's ports."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536:
        return value
    for port in container.get("ports") or []:
        if isinstance(value, str) and port.get("name") == value:
            return int(port.get("containerPort") or 0)
    if isinstance(value, str) and value.isdigit() and 0 < int(value) < 65536:
        return int(value)
    raise ValueError(f"unable to find named port {value!r} in container {container.get('name')}")


async def check(
    probe: Probe, container: Obj, ip: str, env: dict[str, str], cwd: str
) -> tuple[bool, str]:
    """Run the probe once: (success, what failed)."""
    spec = probe.spec
    try:
        if "httpGet" in spec:
            return await _http(spec["httpGet"] or {}, container, ip, probe.timeout_s)
        if "tcpSocket" in spec:
            return await _tcp(spec["tcpSocket"] or {}, container, ip, probe.timeout_s)
        if "exec" in spec:
            return await _exec(spec["exec"] or {}, env, cwd, probe.timeout_s)
    except ValueError as exc:
        return False, str(exc)
    return False, "the probe names no handler (httpGet, tcpSocket or exec)"


#: The User-Agent of the kubelet's HTTP probes (``kube-probe/<major>.<minor>``).
PROBE_USER_AGENT = "kube-probe/1.30"


@functools.cache
def _unverified() -> ssl.SSLContext:
    """The TLS context of HTTPS probes: no certificate or name check, as the kubelet."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


async def _http(get: Obj, container: Obj, ip: str, timeout_s: float) -> tuple[bool, str]:
    port = port_of(get.get("port"), container)
    scheme = str(get.get("scheme") or "HTTP").lower()
    host = str(get.get("host") or ip)
    path = str(get.get("path") or "/")
    path = path if path.startswith("/") else "/" + path
    url = f"{scheme}://{host}:{port}{path}"
    if scheme not in ("http", "https"):
        return False, f'Get "{url}": unsupported protocol scheme "{scheme}"'
    named = {"user-agent": ("User-Agent", PROBE_USER_AGENT), "accept": ("Accept", "*/*")}
    for header in get.get("httpHeaders") or []:
        name = str(header.get("name"))
        named[name.lower()] = (name, str(header.get("value")))
    authority = named.pop("host", ("", f"{host}:{port}"))[1]
    named["connection"] = ("Connection", "close")
    headers = dict(named.values())
    try:
        request = serialize("GET", path, authority, headers, b"")
        async with asyncio.timeout(timeout_s):
            status = await _status_of(host, port, scheme == "https", request)
    except TimeoutError:
        return False, f'Get "{url}": context deadline exceeded (Client.Timeout exceeded)'
    except (OSError, TransportError) as exc:
        return False, f'Get "{url}": {exc or type(exc).__name__}'
    if 200 <= status < 400:
        return True, ""
    return False, f"HTTP probe failed with statuscode: {status}"


async def _status_of(host: str, port: int, tls: bool, request: bytes) -> int:
    """Send ``request`` on a connection of its own; the answer's status code."""
    try:
        reader, writer = await asyncio.open_connection(
            host, port, ssl=_unverified() if tls else None
        )
    except OSError as exc:
        raise TransportError(f"dial tcp {host}:{port}: {exc}") from exc
    try:
        writer.write(request)
        line = await reader.readline()
    except ValueError as exc:  # no line end within the stream's limit (64 KiB)
        raise TransportError("malformed HTTP response: no status line") from exc
    finally:
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()
    if not line:
        raise TransportError("EOF")
    parts = line.decode("latin-1").split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise TransportError(f"malformed HTTP response {line[:64]!r}")
    return int(parts[1])


async def _tcp(sock: Obj, container: Obj, ip: str, timeout_s: float) -> tuple[bool, str]:
    port = port_of(sock.get("port"), container)
    host = str(sock.get("host") or ip)
    try:
        async with asyncio.timeout(timeout_s):
            _, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError) as exc:
        return False, f"dial tcp {host}:{port}: {exc or 'i/o timeout'}"
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True, ""


async def _exec(action: Obj, env: dict[str, str], cwd: str, timeout_s: float) -> tuple[bool, str]:
    command = [str(a) for a in action.get("command") or []]
    if not command:
        return False, "exec probe has no command"
    try:
        proc = await asyncio.create_subprocess_exec(
            *command,
            env={**os.environ, **env},
            cwd=cwd,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
    except OSError as exc:
        return False, str(exc)
    try:
        async with asyncio.timeout(timeout_s):
            out, _ = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return False, f"command timed out after {timeout_s:g}s"
    if proc.returncode == 0:
        return True, ""
    return False, out.decode(errors="replace")[-1024:] or f"exit code {proc.returncode}"

"""A loopback HTTP/1.1 server that answers from a script, for client tests."""

from __future__ import annotations

import asyncio
import ssl


def answer(body: bytes, status: str = "200 OK", extra: str = "") -> bytes:
    """A whole HTTP/1.1 answer: ``status``, a JSON content type, ``extra`` header lines
    (each ending in CRLF) and ``body`` framed by its length."""
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{extra}"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


#: A 200 answer with a small JSON object.
OK = answer(b'{"kind": "ConfigMap", "metadata": {"name": "c"}}')


class Scripted:
    """A loopback HTTP server answering each request with the next scripted bytes.

    A script entry is the raw answer, or None to close the connection without one.
    Each request's method, target and headers are recorded."""

    def __init__(self, script: list[bytes | None], tls: ssl.SSLContext | None = None) -> None:
        self.script = list(script)
        self.tls = tls
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        #: Each request's header lines as sent (a name sent twice shows twice).
        self.header_lines: list[list[str]] = []
        self.connections = 0
        #: Connections that ended (the client closed them, or the script did).
        self.ended = asyncio.Event()
        self.ends = 0
        self.port = 0
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> Scripted:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self.port = int(self.server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.script:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ")
                headers = {
                    name.lower(): value
                    for name, value in (line.split(": ", 1) for line in lines[1:] if line)
                }
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.requests.append((method, target, headers, body))
                self.header_lines.append([line for line in lines[1:] if line])
                answer = self.script.pop(0)
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            self.ends += 1
            self.ended.set()

"""A server TLS context that picks up a renewed certificate without a restart.

``ReloadingTLS`` owns one ``ssl.SSLContext`` (TLS ≥ 1.2, ALPN ``http/1.1``).
``reload()`` reads the certificate and key files; when their content changed and they
form a consistent pair it loads them into the *same* context, so every new handshake
presents the new certificate while open connections carry on. A half-written pair (a
kubelet or ``certs write-files`` between the two writes) is ignored until the files
agree. ``watch()`` polls on the injected clock.

Mutual TLS is optional: given a client CA file, the context requires every client to
present a certificate that chains to it (the API server's, configured by its
AdmissionConfiguration; docs/operator/certificates.md). The CA file is reloaded on the same
poll. OpenSSL can add certificates to a context's trust store but never remove them,
so a CA that leaves the file stays trusted until the process restarts.

The bytes loaded are exactly the bytes validated: they go to OpenSSL through an
in-memory file (``memfd``), so neither a change between check and load nor a
read-only root filesystem can get in the way.

With uvicorn (its ``Config`` takes a context factory, not a context)::

    tls = ReloadingTLS(cert_file, key_file, clock=SystemClock())
    config = uvicorn.Config(app, host=..., port=..., ssl_context_factory=tls.uvicorn_factory)
    # run tls.watch() as a guarded task next to the server; readiness: tls.loaded
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import ssl
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from certs.pem import Malformed, dns_names, fingerprint, key_matches, load_pair
from shared.clock import Clock
from shared.logs import log

_log = logging.getLogger(__name__)

#: Seconds between two looks at the files. A mounted Secret changes about a minute
#: after the Secret itself, so this adds little to the end-to-end delay.
DEFAULT_INTERVAL_S = 10.0


@dataclass(frozen=True)
class CertificateInfo:
    """The certificate new handshakes present."""

    not_after: datetime
    #: SHA-256 of the DER certificate, lower-case hex.
    fingerprint: str
    serial: int
    dns_names: frozenset[str]


def server_context(client_certificates: bool = False) -> ssl.SSLContext:
    """A server context: TLS 1.2 minimum, ALPN ``http/1.1``; a client certificate is
    required when ``client_certificates`` (verified against CAs loaded later: none
    loaded, every handshake fails).

    The apiserver speaks TLS ≥ 1.2 and forces ALPN ``http/1.1`` (kubernetes-facts §1.8).
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.verify_mode = ssl.CERT_REQUIRED if client_certificates else ssl.CERT_NONE
    context.set_alpn_protocols(["http/1.1"])
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    return context


class ReloadingTLS:
    """An ``SSLContext`` kept in step with a certificate and a key file."""

    def __init__(
        self,
        cert_file: str | os.PathLike[str],
        key_file: str | os.PathLike[str],
        clock: Clock,
        interval_s: float = DEFAULT_INTERVAL_S,
        client_ca_file: str | os.PathLike[str] | None = None,
    ) -> None:
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file)
        self.client_ca_file = Path(client_ca_file) if client_ca_file is not None else None
        self.context = server_context(client_certificates=self.client_ca_file is not None)
        self._clock = clock
        self._interval_s = interval_s
        self._digest: str | None = None
        self._info: CertificateInfo | None = None
        self._ca_digest: str | None = None
        self.reload()

    @property
    def loaded(self) -> bool:
        """Whether a certificate is in the context, and the client CA when one is asked
        for (the webhook is not ready before)."""
        return self._info is not None and (
            self.client_ca_file is None or self._ca_digest is not None
        )

    @property
    def certificate(self) -> CertificateInfo | None:
        """The certificate presented now, ``None`` before the first successful load."""
        return self._info

    def uvicorn_factory(self, config: Any, default: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        """For ``uvicorn.Config(ssl_context_factory=...)``: our context, not a new one."""
        return self.context

    def reload(self) -> bool:
        """Load the files if their content changed and is consistent; True if any
        was loaded.

        Never raises: missing, unreadable or mismatched files are logged and the
        current certificate (and client CA) stays in place.
        """
        serving = self._reload_serving()
        client_ca = self._reload_client_ca()
        return serving or client_ca

    def _reload_serving(self) -> bool:
        try:
            cert_pem, key_pem = self.cert_file.read_bytes(), self.key_file.read_bytes()
        except OSError as exc:
            return self._skip("tls.files_unreadable", str(exc))
        digest = hashlib.sha256(cert_pem + b"\0" + key_pem).hexdigest()
        if digest == self._digest:
            return False
        try:
            info = _inspect(cert_pem, key_pem)
            _load_into(self.context, cert_pem, key_pem)
        except (Malformed, ssl.SSLError, OSError) as exc:
            return self._skip("tls.reload_skipped", str(exc))
        self._digest, self._info = digest, info
        log(
            _log,
            logging.INFO,
            "tls.certificate_loaded",
            fingerprint=info.fingerprint,
            not_after=info.not_after.isoformat(),
        )
        return True

    def _reload_client_ca(self) -> bool:
        if self.client_ca_file is None:
            return False
        try:
            ca_pem = self.client_ca_file.read_bytes()
        except OSError as exc:
            return self._skip_ca("tls.client_ca_unreadable", str(exc))
        digest = hashlib.sha256(ca_pem).hexdigest()
        if digest == self._ca_digest:
            return False
        try:
            count = _load_client_cas(self.context, ca_pem)
        except (Malformed, ssl.SSLError, ValueError) as exc:
            return self._skip_ca("tls.client_ca_skipped", str(exc))
        self._ca_digest = digest
        log(
            _log,
            logging.INFO,
            "tls.client_ca_loaded",
            client_ca_file=str(self.client_ca_file),
            certificates=count,
        )
        return True

    async def watch(self) -> None:
        """Poll the files every interval of the injected clock; returns only on cancel."""
        while True:
            await self._clock.sleep(self._interval_s)
            self.reload()

    def _skip(self, event: str, detail: str) -> bool:
        level = logging.WARNING if self.loaded else logging.INFO
        log(_log, level, event, cert_file=str(self.cert_file), detail=detail)
        return False

    def _skip_ca(self, event: str, detail: str) -> bool:
        level = logging.WARNING if self._ca_digest is not None else logging.INFO
        log(_log, level, event, client_ca_file=str(self.client_ca_file), detail=detail)
        return False


def _inspect(cert_pem: bytes, key_pem: bytes) -> CertificateInfo:
    """The leaf's facts; ``Malformed`` unless the key belongs to the leaf."""
    pair = load_pair(cert_pem, key_pem, "TLS file")
    if not key_matches(pair):
        raise Malformed("the key does not match the certificate (half-written pair?)")
    leaf = pair.certificate
    return CertificateInfo(
        leaf.not_valid_after_utc, fingerprint(leaf), leaf.serial_number, dns_names(leaf)
    )


def _load_into(context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """``load_cert_chain`` from memory: tried on a scratch context first.

    OpenSSL swaps the certificate before it checks the key, so a failing load could
    leave the live context without a usable key; the scratch context takes that risk.
    """
    with _in_memory_file(key_pem + b"\n" + cert_pem) as path:
        server_context().load_cert_chain(path)
        context.load_cert_chain(path)


def _load_client_cas(context: ssl.SSLContext, ca_pem: bytes) -> int:
    """Add the CA certificates of ``ca_pem`` to the trust store of client certificates;
    their number. ``Malformed`` when the text holds none (an empty or half-written file
    must not leave a context that trusts nothing new while claiming success)."""
    text = ca_pem.decode("ascii", errors="strict")
    count = text.count("-----BEGIN CERTIFICATE-----")
    if count == 0:
        raise Malformed("no PEM certificate in the client CA file")
    scratch = server_context(client_certificates=True)
    scratch.load_verify_locations(cadata=text)
    context.load_verify_locations(cadata=text)
    return count


@contextlib.contextmanager
def _in_memory_file(content: bytes) -> Iterator[str]:
    """A path OpenSSL can open holding ``content``: a memfd on Linux, else a temp file."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("tls-pair", os.MFD_CLOEXEC)
        try:
            os.write(fd, content)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    with tempfile.NamedTemporaryFile(prefix="tls-pair-") as handle:
        handle.write(content)
        handle.flush()
        yield handle.name

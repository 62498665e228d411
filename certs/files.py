"""The certificates as files in a directory, for local runs (the sandbox, a laptop).

Layout: ``ca.crt`` and ``ca.key`` (the CA), ``tls.crt`` and ``tls.key`` (serving).
The same ``plan`` decides as for the Secrets, so running it again keeps good files.
Each file is replaced atomically (write beside it, then rename); keys are mode 0600.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from certs import issue
from certs.material import realize
from certs.plan import CA_CRT, TLS_CRT, TLS_KEY, Action, Plan, Policy, plan

CA_KEY = "ca.key"
_KEY_MODE = 0o600
_CERT_MODE = 0o644


def read_dir(directory: Path) -> tuple[dict[str, bytes] | None, dict[str, bytes] | None]:
    """(serving data, CA data) in the shape of the Secrets' data; ``None`` when absent."""
    files = {name: _read(directory / name) for name in (TLS_CRT, TLS_KEY, CA_CRT, CA_KEY)}
    serving = {k: v for k, v in files.items() if k != CA_KEY and v is not None}
    ca = {TLS_CRT: files[CA_CRT], TLS_KEY: files[CA_KEY]}
    ca_data = {k: v for k, v in ca.items() if v is not None}
    return (serving or None), (ca_data or None)


def write_files(
    directory: Path, service: str, namespace: str, now: datetime, policy: Policy
) -> Plan:
    """Make ``directory`` hold a good CA and serving certificate; returns the plan."""
    serving, ca = read_dir(directory)
    decision = plan(serving, ca, service, namespace, now, policy)
    if decision.action is Action.KEEP:
        return decision
    material = realize(decision, issue.service_dns_names(service, namespace), now, policy)
    directory.mkdir(parents=True, exist_ok=True)
    data = material.serving_data()
    if decision.action is Action.RENEW_ALL:
        _write(directory / CA_KEY, material.ca.key_pem, _KEY_MODE)
    _write(directory / CA_CRT, data[CA_CRT], _CERT_MODE)
    _write(directory / TLS_KEY, data[TLS_KEY], _KEY_MODE)
    _write(directory / TLS_CRT, data[TLS_CRT], _CERT_MODE)
    return decision


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _write(path: Path, content: bytes, mode: int) -> None:
    """Write ``content`` next to ``path`` with ``mode``, then rename over it."""
    scratch = path.with_name(f".{path.name}.tmp")
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, content)
    finally:
        os.close(fd)
    os.chmod(scratch, mode)
    os.replace(scratch, path)

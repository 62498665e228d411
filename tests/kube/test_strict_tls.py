"""K8S_TLS_STRICT_VERIFY: OpenSSL's strict X.509 checks on the API server connection.

A cluster PKI made by older tooling has no Authority Key Identifier on its serving
certificate. Strict (the default, on every Python) refuses it on both clients — the
official one (worker threads) and the loop's; ``false`` accepts it while still verifying
the chain: a certificate from another CA stays refused. The processes log which
credentials they use and, relaxed, ``k8s.tls_relaxed`` at WARNING.
"""

from __future__ import annotations

import asyncio
import http.server
import ipaddress
import logging
import ssl
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from shared import errors
from shared.gateway import Gateway, load_configuration
from shared.gateway.loop import LoopGateway
from shared.settings import EnvReader, read_common


def _name(text: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])


def legacy_pki(directory: Path, tag: str) -> tuple[Path, Path, Path]:
    """A CA and a serving certificate for 127.0.0.1 without key identifiers (as old
    tooling made them): (ca.crt, tls.crt, tls.key)."""
    now = datetime.now(UTC) - timedelta(minutes=1)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())

    def build(subject: str, public: ec.EllipticCurvePublicKey, ca: bool) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(subject))
            .issuer_name(_name(f"legacy-ca-{tag}"))
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
            builder = builder.add_extension(san, critical=False)
        return builder.sign(ca_key, hashes.SHA256())

    paths = (directory / f"{tag}-ca.crt", directory / f"{tag}.crt", directory / f"{tag}.key")
    paths[0].write_bytes(
        build(f"legacy-ca-{tag}", ca_key.public_key(), True).public_bytes(
            serialization.Encoding.PEM
        )
    )
    paths[1].write_bytes(
        build("kube-apiserver", key.public_key(), False).public_bytes(serialization.Encoding.PEM)
    )
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


class _Namespaces(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'{"kind": "ConfigMap", "metadata": {"name": "c"}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def legacy_server(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """An HTTPS server on loopback with a legacy certificate: (port, its CA file)."""
    ca, cert, key = legacy_pki(tmp_path, "served")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Namespaces)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], ca
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _kubeconfig(tmp_path: Path, port: int, ca: Path) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: 'https://127.0.0.1:{port}', "
        f"certificate-authority: '{ca}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    return str(path)


async def _get(gateway: Gateway) -> dict[str, object]:
    try:
        return (await gateway.request("GET", "/api/v1/namespaces/default/configmaps/c")).body
    finally:
        if isinstance(gateway, LoopGateway):
            await gateway.aclose()
        else:
            gateway.close()


@pytest.mark.parametrize("kind", [Gateway, LoopGateway])
def test_strict_refuses_a_certificate_without_authority_key_identifier(
    kind: type[Gateway], legacy_server: tuple[int, Path], tmp_path: Path
) -> None:
    port, ca = legacy_server
    gateway = kind(load_configuration(_kubeconfig(tmp_path, port, ca)), timeout_s=5.0)
    assert gateway.strict_tls  # the default
    with pytest.raises(errors.KubeError, match=r"(?i)certificate verify failed"):
        asyncio.run(_get(gateway))


@pytest.mark.parametrize("kind", [Gateway, LoopGateway])
def test_relaxed_accepts_it_and_still_verifies_the_chain(
    kind: type[Gateway], legacy_server: tuple[int, Path], tmp_path: Path
) -> None:
    port, ca = legacy_server
    config = _kubeconfig(tmp_path, port, ca)
    relaxed = kind(load_configuration(config), timeout_s=5.0, strict_tls=False)
    assert asyncio.run(_get(relaxed))["kind"] == "ConfigMap"
    other_ca, _, _ = legacy_pki(tmp_path, "other")
    stranger = kind(
        load_configuration(_kubeconfig(tmp_path, port, other_ca)), timeout_s=5.0, strict_tls=False
    )
    with pytest.raises(errors.KubeError, match=r"(?i)certificate verify failed"):
        asyncio.run(_get(stranger))


@pytest.mark.parametrize(
    ("value", "strict"),
    [
        (None, True),
        ("false", False),
        (" OFF ", False),
        ("0", False),
        ("true", True),
        ("maybe", True),
        ("", True),
    ],
)
def test_the_setting_is_a_seed_boolean(value: str | None, strict: bool) -> None:
    """Case-insensitive, trimmed; a word that is not a boolean keeps the default
    quietly (the seed's rule for booleans)."""
    env = {} if value is None else {"K8S_TLS_STRICT_VERIFY": value}
    reader = EnvReader(env)
    assert read_common(reader).tls_strict_verify is strict
    assert reader.problems == []


def test_a_process_logs_its_credentials_and_a_relaxed_verification(
    legacy_server: tuple[int, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    port, ca = legacy_server
    env = {"KUBECONFIG": _kubeconfig(tmp_path, port, ca), "K8S_TLS_STRICT_VERIFY": "false"}
    caplog.set_level(logging.INFO, logger="shared.gateway")
    gateway = Gateway.for_process(read_common(EnvReader(env)))
    assert not gateway.strict_tls
    assert asyncio.run(_get(gateway))["kind"] == "ConfigMap"
    lines = [(r.getMessage(), r.levelno, getattr(r, "fields", {})) for r in caplog.records]
    assert ("k8s.auth", logging.INFO, {"source": "kubeconfig"}) in lines
    relaxed = [(level, fields) for event, level, fields in lines if event == "k8s.tls_relaxed"]
    assert [level for level, _ in relaxed] == [logging.WARNING]
    assert "Authority Key Identifier" in relaxed[0][1]["detail"]
    caplog.clear()
    strict = Gateway.for_process(read_common(EnvReader({"KUBECONFIG": env["KUBECONFIG"]})))
    strict.close()
    assert strict.strict_tls
    assert not any("k8s.tls_relaxed" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("relaxed", [False, True])
def test_the_kubectl_plugin_honours_the_setting(
    relaxed: bool,
    legacy_server: tuple[int, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``kubectl gpures`` talks to the same API server as the processes: the escape
    hatch is read from its environment too."""
    from reconciler import cli

    port, ca = legacy_server
    monkeypatch.setenv("KUBECONFIG", _kubeconfig(tmp_path, port, ca))
    if relaxed:
        monkeypatch.setenv("K8S_TLS_STRICT_VERIFY", "false")
    else:
        monkeypatch.delenv("K8S_TLS_STRICT_VERIFY", raising=False)
    cli.main(["list", "-n", "alice"])
    refused = "certificate verify failed" in capsys.readouterr().err.lower()
    assert refused is not relaxed

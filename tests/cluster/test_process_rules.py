"""The process kubelet's pure rules: back-off, env, mounts, probes, endpoints, images."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sandbox.cluster.backoff import INITIAL_S, MAX_S, Entry, advanced, restart_wait
from sandbox.cluster.endpoints import endpoints_of
from sandbox.cluster.mounts import Mount, VolumeError, rewrite, volume_files
from sandbox.cluster.podenv import ConfigError, container_env, expand
from sandbox.cluster.podnet import Block, address
from sandbox.cluster.podrun import PODPATH, is_local, log_tail, repository
from sandbox.cluster.probes import Counter, Probe, port_of

POD: dict[str, Any] = {
    "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "labels": {"app": "x"}},
    "spec": {"nodeName": "n1"},
}


def test_backoff_restarts_at_once_then_doubles_to_the_cap_and_resets_after_ten_minutes() -> None:
    entry = None
    waits = []
    now = 0.0
    for _ in range(8):
        wait = restart_wait(entry, now, now)
        waits.append(wait)
        now += wait
        entry = advanced(entry, now)
    assert waits == [0, 10, 20, 40, 80, 160, 300, 300]
    assert entry == Entry(MAX_S, now)
    # ran longer than twice the cap since the last restart: starts over at once
    assert restart_wait(entry, now + 601, now + 601) == 0
    assert advanced(entry, now + 601) == Entry(INITIAL_S, now + 601)
    assert restart_wait(Entry(10, 0), 4, 6) == 8  # the wait counts from the exit


def test_expand_as_the_kubelet_does() -> None:
    env = {"A": "1"}
    assert expand("$(A)-$(B)-$$(A)-$$", env) == "1-$(B)-$(A)-$"


@pytest.mark.parametrize(
    ("var", "message"),
    [
        ({"name": "X", "valueFrom": {}}, "exactly one source"),
        ({"name": "X", "valueFrom": {"a": {}, "b": {}}}, "exactly one source"),
        ({"name": "X", "valueFrom": {"secretKeyRef": "nope"}}, "needs a name and a key"),
        ({"name": "X", "valueFrom": {"secretKeyRef": {"name": "s"}}}, "needs a name and a key"),
        ({"name": "X", "valueFrom": {"bogusRef": {}}}, "unknown valueFrom source"),
        ({"value": "no name"}, "has no name"),
        ("not a mapping", "has no name"),
    ],
    ids=["empty", "two-sources", "ref-not-mapping", "no-key", "unknown", "no-name", "not-mapping"],
)
def test_malformed_env_is_a_config_error(var: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        container_env(POD, {"env": [var]}, "127.2.0.2", "127.0.0.1", lambda kind, name: None)


def test_env_from_a_missing_optional_source_is_empty_and_a_required_one_refuses() -> None:
    optional = {"envFrom": [{"secretRef": {"name": "s", "optional": True}}]}
    assert container_env(POD, optional, "ip", "h", lambda kind, name: None) == {}
    required = {"envFrom": [{"configMapRef": {"name": "c"}}]}
    with pytest.raises(ConfigError, match='configmap "c" not found'):
        container_env(POD, required, "ip", "h", lambda kind, name: None)


def test_field_refs_to_labels() -> None:
    env = [{"name": "L", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}}]
    assert container_env(POD, {"env": env}, "ip", "h", lambda k, n: None) == {"L": "x"}


def test_rewrite_maps_paths_under_mounts_longest_first() -> None:
    mounts = [Mount("/etc", Path("/v/etc")), Mount("/etc/tls/", Path("/v/tls"))]
    assert rewrite("/etc/tls/tls.crt", mounts) == "/v/tls/tls.crt"
    assert rewrite("/etc/tls", mounts) == "/v/tls"
    assert rewrite("/etc/x", mounts) == "/v/etc/x"
    assert rewrite("/etcetera", mounts) == "/etcetera"
    assert rewrite("relative/etc/tls", mounts) == "relative/etc/tls"


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([{"key": "absent", "path": "a"}], "non-existent secret key: absent"),
        ([{"key": "k", "path": "/abs"}], "invalid item path"),
        ([{"key": "k", "path": "../up"}], "invalid item path"),
        ([{"key": "k", "path": ""}], "invalid item path"),
    ],
    ids=["missing-key", "absolute", "escaping", "empty"],
)
def test_malformed_volume_items_are_refused(items: list[Any], message: str) -> None:
    volume = {"name": "v", "secret": {"secretName": "s", "items": items}}
    with pytest.raises(VolumeError, match=message):
        volume_files("secret", volume, "ns", {"k": b"v"})


def test_a_missing_optional_volume_source_is_empty() -> None:
    volume = {"name": "v", "configMap": {"name": "c", "optional": True}}
    assert volume_files("configMap", volume, "ns", None) == {}
    with pytest.raises(VolumeError, match='configmap "c" not found'):
        volume_files("configMap", {"name": "v", "configMap": {"name": "c"}}, "ns", None)


def test_probe_defaults_and_malformed_timings() -> None:
    probe = Probe.of({"httpGet": {}, "periodSeconds": "fast", "failureThreshold": 0})
    assert (probe.period_s, probe.timeout_s, probe.failure_threshold) == (10, 1, 1)
    assert (probe.success_threshold, probe.initial_delay_s) == (1, 0)


def test_probe_ports_by_number_and_name() -> None:
    container = {"name": "c", "ports": [{"name": "http", "containerPort": 8080}]}
    assert port_of("http", container) == 8080
    assert port_of(9090, container) == 9090
    for bad in ("nosuch", 0, 70000, None, True):
        with pytest.raises(ValueError, match="unable to find named port"):
            port_of(bad, container)


def test_counter_flips_after_the_thresholds() -> None:
    counter = Counter(False, success_threshold=2, failure_threshold=3)
    assert [counter.add(True), counter.add(True)] == [False, True]
    assert [counter.add(False), counter.add(True), counter.add(False)] == [False] * 3
    assert [counter.add(False), counter.add(False)] == [False, True]
    assert counter.state is False


def _pod(name: str, ip: str, ready: bool, port: int = 8443, **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": name, "labels": {"app": "w"}, **meta},
        "spec": {
            "nodeName": "n",
            "containers": [{"ports": [{"name": "https", "containerPort": port}]}],
        },
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def test_endpoints_list_ready_and_unready_pods_by_resolved_port() -> None:
    svc: dict[str, Any] = {
        "metadata": {"name": "s", "namespace": "ns"},
        "spec": {
            "selector": {"app": "w"},
            "ports": [{"name": "https", "port": 443, "targetPort": "https"}],
        },
    }
    pods = [
        _pod("b", "127.2.0.3", True),
        _pod("a", "127.2.0.2", False),
        _pod("c", "127.2.0.4", True, port=9443),
        _pod("gone", "127.2.0.5", True, deletionTimestamp="2026-01-01T00:00:00Z"),
        {
            **_pod("other", "127.2.0.6", True),
            "metadata": {"name": "o", "namespace": "ns", "labels": {}},
        },
    ]
    subsets = endpoints_of(svc, pods)
    assert len(subsets) == 2
    first = subsets[0]
    assert [a["ip"] for a in first["addresses"]] == ["127.2.0.3"]
    assert [a["ip"] for a in first["notReadyAddresses"]] == ["127.2.0.2"]
    assert first["ports"] == [{"name": "https", "port": 8443, "protocol": "TCP"}]
    assert first["addresses"][0]["targetRef"]["name"] == "b"
    assert subsets[1]["ports"][0]["port"] == 9443
    svc["spec"]["publishNotReadyAddresses"] = True
    assert [a["ip"] for a in endpoints_of(svc, pods)[0]["addresses"]] == ["127.2.0.2", "127.2.0.3"]


def test_images_of_our_repository_run_locally_whatever_the_tag() -> None:
    assert repository("ghcr.io/galends/gpu-reservation:1.2.3") == "ghcr.io/galends/gpu-reservation"
    assert repository("localhost:5000/x") == "localhost:5000/x"
    assert (
        repository("ghcr.io/galends/gpu-reservation@sha256:ab") == "ghcr.io/galends/gpu-reservation"
    )
    ours = {"name": "c", "image": "ghcr.io/galends/gpu-reservation:dev"}
    assert is_local({"spec": {"containers": [ours]}})
    assert not is_local({"spec": {"containers": [ours, {"image": "busybox"}]}})
    assert not is_local({"spec": {"containers": []}})


def test_log_tail_keeps_the_last_80_lines_and_2048_bytes(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    assert log_tail(log).splitlines() == [f"line {i}" for i in range(20, 100)]
    log.write_text("x" * 5000)
    assert len(log_tail(log)) == 2048
    assert log_tail(tmp_path / "absent") == ""


def test_two_sandboxes_claim_different_blocks_of_pod_addresses() -> None:
    first, second = Block(), Block()
    try:
        assert first.number != second.number
        assert address(7, 0) == "127.7.0.2"
        assert address(7, 251) == "127.7.1.3"
        probe = socket.socket()
        with pytest.raises(OSError, match="in use"):
            probe.bind((f"127.{first.number}.0.1", 10250))
        probe.close()
    finally:
        first.close()
        second.close()


def _bound_address(family: str, host: str) -> str:
    code = (
        f"import socket; s = socket.socket(socket.{family}); s.bind(({host!r}, 0)); "
        "print(s.getsockname()[0])"
    )
    env = {**os.environ, "PYTHONPATH": str(PODPATH), "SANDBOX_POD_IP": "127.9.0.7"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_a_wildcard_bind_lands_on_the_pod_address_and_a_named_one_stays() -> None:
    assert _bound_address("AF_INET", "") == "127.9.0.7"
    assert _bound_address("AF_INET", "0.0.0.0") == "127.9.0.7"
    assert _bound_address("AF_INET", "127.0.0.1") == "127.0.0.1"


@pytest.mark.skipif(not socket.has_ipv6, reason="no IPv6 sockets here")
def test_an_ipv6_wildcard_bind_lands_on_the_mapped_pod_address() -> None:
    try:
        socket.socket(socket.AF_INET6).close()
    except OSError:
        pytest.skip("IPv6 sockets cannot be created here")
    assert _bound_address("AF_INET6", "::") == "::ffff:127.9.0.7"


def test_a_path_inside_the_checkout_is_the_images_and_never_rewritten() -> None:
    """A checkout under /tmp (as CI clones it) keeps its programs when a pod mounts an
    emptyDir at /tmp, as the chart does."""
    mounts = [Mount("/tmp", Path("/v/tmp"))]
    checkout = Path("/tmp/clone")
    assert rewrite("/tmp/clone/tests/program.py", mounts, checkout) == "/tmp/clone/tests/program.py"
    assert rewrite("/tmp/clone", mounts, checkout) == "/tmp/clone"
    assert rewrite("/tmp/scratch/x", mounts, checkout) == "/v/tmp/scratch/x"
    assert rewrite("/tmp/clone2/x", mounts, checkout) == "/v/tmp/clone2/x"

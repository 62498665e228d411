"""Real kubectl against the emulator (its written admin kubeconfig, over TLS)."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import httpx
import pytest

from shared import vocab
from tests.kube.conftest import Running

pytestmark = pytest.mark.kubectl

CHART = Path(__file__).resolve().parents[2] / "charts" / vocab.PRODUCT_NAME
CRD = CHART / "crds" / f"{vocab.CRD_NAME}.yaml"


class Kubectl:
    def __init__(self, config: Path) -> None:
        self.config = config

    def __call__(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        done = subprocess.run(
            ["kubectl", f"--kubeconfig={self.config}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr}")
        return done.stdout + done.stderr


@pytest.fixture
def kubectl(kube: Running, tmp_path: Path) -> Kubectl:
    config = tmp_path / "kubeconfig"
    config.write_text(kube.server.kubeconfig(), encoding="utf-8")
    return Kubectl(config)


POD = """
apiVersion: v1
kind: Pod
metadata: {{name: web, namespace: {ns}, labels: {{app: web}}}}
spec:
  containers: [{{name: c, image: "busybox:1.36"}}]
"""


def test_namespace_pod_lifecycle(kubectl: Kubectl, api: httpx.Client) -> None:
    """create namespace and pod from YAML, list, describe with Events, patch labels, wait, "
    "delete."""
    ns = f"k-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", ns)
    assert "pod/web created" in kubectl("create", "-f", "-", stdin=POD.format(ns=ns))
    assert "configured" in kubectl("apply", "-f", "-", stdin=POD.format(ns=ns))
    listing = kubectl("get", "pods", "-n", ns)
    assert "web" in listing
    assert "Pending" in listing
    uid = json.loads(kubectl("get", "pod", "web", "-n", ns, "-o", "json"))["metadata"]["uid"]
    event = {
        "metadata": {"name": "web.1"},
        "involvedObject": {"kind": "Pod", "name": "web", "namespace": ns, "uid": uid},
        "reason": "Tested",
        "message": "seen by describe",
        "type": "Normal",
        "source": {"component": "tester"},
    }
    assert api.post(f"/api/v1/namespaces/{ns}/events", json=event).status_code == 201
    described = kubectl("describe", "pod", "web", "-n", ns)
    assert "Tested" in described
    assert "seen by describe" in described
    kubectl("patch", "pod", "web", "-n", ns, "-p", '{"metadata":{"labels":{"tier":"front"}}}')
    kubectl("label", "pod", "web", "-n", ns, "extra=yes")
    labels = kubectl("get", "pod", "web", "-n", ns, "--show-labels")
    assert "tier=front" in labels
    assert "extra=yes" in labels
    kubectl("wait", "--for=jsonpath={.status.phase}=Pending", "pod/web", "-n", ns, "--timeout=10s")
    assert 'pod "web" deleted' in kubectl("delete", "pod", "web", "-n", ns)
    assert "No resources found" in kubectl("get", "pods", "-n", ns)


def test_gpures_printer_columns(kubectl: Kubectl) -> None:
    """kubectl get <short name> shows the CRD's printer columns."""
    kubectl("apply", "-f", str(CRD))
    kubectl("wait", "--for=condition=Established", f"crd/{vocab.CRD_NAME}", "--timeout=10s")
    reservation = """
apiVersion: galends.io/v1alpha1
kind: GPUReservation
metadata: {name: res-7, namespace: alice}
spec: {reservationId: 7, owner: alice, gpuClass: h100, gpuClassName: H100, gpuCount: 4,
       kind: booking, start: "2026-01-01T00:00:00Z", end: "2026-01-02T00:00:00Z",
       state: active, updatedAt: "2026-01-01T00:00:00Z"}
"""
    kubectl("apply", "-f", "-", stdin=reservation)
    header, row = kubectl("get", vocab.CRD_SHORT_NAME, "-n", "alice").strip().splitlines()[:2]
    assert header.split()[:5] == ["NAME", "OWNER", "CLASS", "KIND", "USED"]
    assert row.split()[:5] == ["res-7", "alice", "h100", "booking", "4"]
    kubectl("apply", "-f", "-", stdin=reservation.replace("7", "10"))
    names = kubectl("get", vocab.CRD_SHORT_NAME, "-n", "alice", "-o", "name").split()
    kind = f"gpureservation.{vocab.CRD_GROUP}"
    assert names == [f"{kind}/res-10", f"{kind}/res-7"]  # the server's order: by name
    by_id = kubectl(
        "get", vocab.CRD_SHORT_NAME, "-n", "alice", "--sort-by=.spec.reservationId", "-o", "name"
    ).split()
    assert by_id == [f"{kind}/res-7", f"{kind}/res-10"]
    kubectl("delete", vocab.CRD_SHORT_NAME, "res-7", "res-10", "-n", "alice")


def test_get_watch_prints_changes(kubectl: Kubectl, api: httpx.Client) -> None:
    """kubectl get --watch streams Table events (ended here by --request-timeout)."""
    api.post("/api/v1/namespaces/alice/configmaps", json={"metadata": {"name": "watched"}})
    out = kubectl(
        "get", "configmaps", "-n", "alice", "--watch", "--request-timeout=2s", check=False
    )
    assert "watched" in out
    api.delete("/api/v1/namespaces/alice/configmaps/watched")

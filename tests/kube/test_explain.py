"""``kubectl explain`` of a custom resource: the OpenAPI v3 document of its group and
version carries the CRD's schema, tagged with its group, version and kind
(``sandbox.kube.discovery.custom_model``)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import yaml

from shared import vocab
from tests.kube.conftest import Running
from tests.kube.test_kubectl import CRD, Kubectl

DOC = f"/openapi/v3/apis/{vocab.CRD_GROUP}/{vocab.CRD_VERSION}"
MODEL = f"io.galends.{vocab.CRD_VERSION}.{vocab.CRD_KIND}"


@pytest.fixture(scope="module")
def installed(kube: Running) -> None:
    with kube.client() as admin:
        crd = yaml.safe_load(CRD.read_text(encoding="utf-8"))
        made = admin.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd)
        assert made.status_code in (201, 409), made.text


def test_the_group_document_carries_the_crds_schema(installed: None, api: httpx.Client) -> None:
    """Rule: the custom resource's model is the CRD's ``openAPIV3Schema`` with
    ``apiVersion``, ``kind`` and ``metadata`` described and its GVK; the metadata
    reference resolves in the same document; built-in groups carry no models."""
    schemas = api.get(DOC).json()["components"]["schemas"]
    model = schemas[MODEL]
    assert model["x-kubernetes-group-version-kind"] == [
        {"group": vocab.CRD_GROUP, "kind": vocab.CRD_KIND, "version": vocab.CRD_VERSION}
    ]
    ref = model["properties"]["metadata"]["allOf"][0]["$ref"]
    assert ref.rsplit("/", 1)[1] in schemas
    crd = yaml.safe_load(CRD.read_text(encoding="utf-8"))
    written = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert model["properties"]["status"] == written["properties"]["status"]
    assert api.get("/openapi/v3/api/v1").json()["components"]["schemas"] == {}


def test_the_index_hash_follows_the_document(kube: Running, api: httpx.Client) -> None:
    """Rule: the index names each document with a hash of its content, so kubectl's
    cache reads a changed schema again."""
    path = f"apis/{vocab.CRD_GROUP}/{vocab.CRD_VERSION}"
    first = api.get("/openapi/v3").json()["paths"][path]["serverRelativeURL"]
    assert first == api.get("/openapi/v3").json()["paths"][path]["serverRelativeURL"]
    assert first.startswith(f"/openapi/v3/{path}?hash=")


@pytest.mark.kubectl
def test_kubectl_explains_a_gpureservation(installed: None, kube: Running, tmp_path: Path) -> None:
    """Rule: real ``kubectl explain`` shows the kind's and each field's description,
    down to the ledger's holds, and refuses a field the schema does not have."""
    config = tmp_path / "kubeconfig"
    config.write_text(kube.server.kubeconfig(), encoding="utf-8")
    kubectl = Kubectl(config)
    kind = kubectl("explain", vocab.CRD_PLURAL)
    assert f"KIND:       {vocab.CRD_KIND}" in kind
    assert "One reservation of the reservation app and its GPU budget ledger." in kind
    holds = kubectl("explain", f"{vocab.CRD_SHORT_NAME}.status.holds")
    assert "Ledger holds; their GPUs never sum to more than spec.gpuCount." in holds
    assert "podUid" in holds
    # the ledger keeps keys of claim ids, never the ids (docs/operator/threat-model.md)
    claim = kubectl("explain", f"{vocab.CRD_PLURAL}.status.holds.claim")
    assert "sha256:" in claim
    assert "never the id itself" in claim
    missing = kubectl("explain", f"{vocab.CRD_PLURAL}.spec.nope", check=False)
    assert 'field "nope" does not exist' in missing

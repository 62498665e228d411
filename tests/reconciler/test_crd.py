"""The CRD file: names match the vocabulary, the schema is structural, nothing is pruned."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from shared import model, vocab
from shared.clock import utc

ROOT = Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / "charts" / vocab.PRODUCT_NAME / "crds" / f"{vocab.CRD_NAME}.yaml"


def crd() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(CRD_FILE.read_text(encoding="utf-8"))
    return data


def version() -> dict[str, Any]:
    (only,) = crd()["spec"]["versions"]
    return dict(only)


def full_reservation() -> model.GPUReservation:
    """Every optional field set, so to_object writes every key it knows."""
    facts = model.ReservationFacts(
        id=7,
        owner="alice",
        gpu_class="a100",
        gpu_class_name="A100",
        gpu_count=8,
        kind=model.Kind.BOOKING,
        start=utc(2026, 1, 5, 9),
        end=utc(2026, 1, 5, 12),
        state=model.State.CANCELLED,
        updated_at=utc(2026, 1, 4),
        owner_id=3,
        group="lab",
        cancel_reason="no-show",
    )
    hold = model.Hold("c-1", 2, utc(2026, 1, 5, 9), pod="p", pod_uid="u", announced=True)
    return model.GPUReservation(facts, (hold,), "12")


def undeclared(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    """Paths in ``value`` the schema would prune."""
    if schema.get("x-kubernetes-preserve-unknown-fields") and "properties" not in schema:
        return []
    if isinstance(value, dict):
        props = schema.get("properties", {})
        missing = []
        for key, child in value.items():
            if key not in props:
                missing.append(f"{path}.{key}")
            else:
                missing += undeclared(child, props[key], f"{path}.{key}")
        return missing
    if isinstance(value, list):
        return [m for item in value for m in undeclared(item, schema.get("items", {}), path)]
    return []


def untyped(schema: dict[str, Any], path: str) -> list[str]:
    """Nodes without a ``type`` (a structural schema needs one everywhere)."""
    found = [] if "type" in schema else [path]
    for key, child in schema.get("properties", {}).items():
        found += untyped(child, f"{path}.{key}")
    if "items" in schema:
        found += untyped(schema["items"], f"{path}[]")
    return found


def test_names_match_the_vocabulary() -> None:
    spec = crd()["spec"]
    assert crd()["metadata"]["name"] == vocab.CRD_NAME
    assert spec["group"] == vocab.CRD_GROUP
    assert spec["scope"] == "Namespaced"
    names = spec["names"]
    assert names["kind"] == vocab.CRD_KIND
    assert names["listKind"] == vocab.CRD_LIST_KIND
    assert names["plural"] == vocab.CRD_PLURAL
    assert names["singular"] == vocab.CRD_SINGULAR
    assert names["shortNames"] == [vocab.CRD_SHORT_NAME]
    assert version()["name"] == vocab.CRD_VERSION
    assert version()["subresources"] == {"status": {}}


def test_schema_is_structural() -> None:
    assert untyped(version()["schema"]["openAPIV3Schema"], "") == []


def test_schema_declares_every_field_the_model_writes() -> None:
    obj = model.to_object(full_reservation(), "ns", utc(2026, 1, 5, 10))
    schema = version()["schema"]["openAPIV3Schema"]
    assert undeclared({"spec": obj["spec"], "status": obj["status"]}, schema, "") == []


def test_the_prune_check_would_see_an_undeclared_field() -> None:
    schema = version()["schema"]["openAPIV3Schema"]
    assert undeclared({"spec": {"bogus": 1}}, schema, "") == [".spec.bogus"]
    hold_extra = {"status": {"holds": [{"claim": "c", "nope": 1}]}}
    assert undeclared(hold_extra, schema, "") == [".status.holds.nope"]


def test_printer_columns_show_owner_class_kind_usage_window_and_phase() -> None:
    columns = {c["name"]: c["jsonPath"] for c in version()["additionalPrinterColumns"]}
    assert columns["Owner"] == ".spec.owner"
    assert columns["Class"] == ".spec.gpuClass"
    assert columns["Kind"] == ".spec.kind"
    assert columns["Used"] == ".status.usedGpus"
    assert columns["GPUs"] == ".spec.gpuCount"
    assert columns["Start"] == ".spec.start"
    assert columns["End"] == ".spec.end"
    assert columns["Phase"] == ".status.phase"


def test_enums_match_the_model() -> None:
    props = version()["schema"]["openAPIV3Schema"]["properties"]
    assert props["spec"]["properties"]["kind"]["enum"] == [k.value for k in model.Kind]
    assert props["spec"]["properties"]["state"]["enum"] == [s.value for s in model.State]
    phases = props["status"]["properties"]["phase"]["enum"]
    assert phases == [p.value for p in model.Phase]

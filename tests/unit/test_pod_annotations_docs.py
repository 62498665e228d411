"""docs/user/pod-annotations.md and its example manifest keep step with ``shared/vocab.py``.

Every ``galends/*`` key and every Event reason of the vocabulary has a row in the
reference, every row names something the vocabulary has, a reason's documented type is
the one ``reconciler.base.events`` gives it, and a row that says *live* names a constant the
product code uses. The downward-API example is a valid Pod for the Kubernetes versions
we support and projects exactly the controller-written keys.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared import vocab
from tests.chart.render import KUBERNETES_VERSIONS, validate

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "user" / "pod-annotations.md"
MANIFEST = ROOT / "docs" / "user" / "examples" / "widget-pod.yaml"
PRODUCT = ("shared", "webhook", "reconciler", "certs")
ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|(.*)$")
MENTIONED_KEY = re.compile(re.escape(vocab.ANNOTATION_PREFIX) + r"[a-z][-a-z]*")
FIELD_PATH = re.compile(r"^metadata\.annotations\['([^']+)'\]$")


def constants() -> dict[str, str]:
    """Name → value of every string constant of the vocabulary."""
    return {n: v for n, v in vars(vocab).items() if n.isupper() and isinstance(v, str)}


def annotation_keys(names: dict[str, str]) -> dict[str, str]:
    """Value → constant name of every ``galends/*`` key (the prefix itself excluded)."""
    prefix = vocab.ANNOTATION_PREFIX
    return {v: n for n, v in names.items() if v.startswith(prefix) and v != prefix}


def reasons(names: dict[str, str]) -> dict[str, str]:
    """Value → constant name of every Event reason."""
    return {v: n for n, v in names.items() if n.startswith("REASON_")}


def rows(text: str) -> dict[str, list[str]]:
    """First cell (a backticked name) → the other cells, of every table row."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        if match := ROW.match(line.strip()):
            found[match.group(1)] = [c.strip() for c in match.group(2).split("|")[:-1]]
    return found


def gaps(text: str, names: dict[str, str]) -> list[str]:
    """Everything the reference misses or names wrongly (empty when in step)."""
    table = rows(text)
    keys, reasons_ = annotation_keys(names), reasons(names)
    found = [f"undocumented key {k}" for k in sorted(keys) if k not in table]
    found += [f"undocumented reason {r}" for r in sorted(reasons_) if r not in table]
    found += [f"unknown key {k}" for k in sorted(set(MENTIONED_KEY.findall(text)) - set(keys))]
    for reason in sorted(set(reasons_) & set(table)):
        wanted = "Warning" if reason in vocab.WARNING_REASONS else "Normal"
        if table[reason][0] != wanted:
            found.append(f"{reason} is documented as {table[reason][0]}, is {wanted}")
    return found


def product_source() -> str:
    texts = [
        path.read_text(encoding="utf-8")
        for package in PRODUCT
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != ROOT / "shared" / "vocab.py"
    ]
    return "\n".join(texts)


def status_of(cells: list[str]) -> str:
    """The Status cell: the second cell of a reason row, the third of a key row."""
    return next(c for c in cells if c.startswith(("live", "not live")))


def test_the_reference_covers_the_vocabulary() -> None:
    assert gaps(DOC.read_text(encoding="utf-8"), constants()) == []


def test_a_new_key_or_reason_without_a_row_is_caught() -> None:
    text = DOC.read_text(encoding="utf-8")
    names = {
        **constants(),
        "FUTURE_KEY": vocab.ANNOTATION_PREFIX + "future-key",
        "REASON_FUTURE": "FutureThing",
    }
    assert gaps(text, names) == [
        f"undocumented key {vocab.ANNOTATION_PREFIX}future-key",
        "undocumented reason FutureThing",
    ]


def test_a_wrong_type_or_a_stale_key_is_caught() -> None:
    text = DOC.read_text(encoding="utf-8")
    reason = vocab.REASON_RESERVATION_FULL
    broken = text.replace(f"| `{reason}` | Warning |", f"| `{reason}` | Normal |")
    broken += f"\nSee `{vocab.ANNOTATION_PREFIX}no-such-key`.\n"
    assert gaps(broken, constants()) == [
        f"unknown key {vocab.ANNOTATION_PREFIX}no-such-key",
        f"{reason} is documented as Normal, is Warning",
    ]


def test_what_the_reference_calls_live_is_used_by_the_product() -> None:
    names = constants()
    table = rows(DOC.read_text(encoding="utf-8"))
    source = product_source()
    documented = {**annotation_keys(names), **reasons(names)}
    live = [n for value, n in documented.items() if status_of(table[value]).startswith("live")]
    assert len(live) >= 20
    unused = [n for n in live if not re.search(rf"\b{n}\b", source)]
    assert unused == []


def test_what_the_reference_calls_not_live_is_not_used_yet() -> None:
    """A row left at "not live yet" after its feature landed is stale."""
    names = constants()
    table = rows(DOC.read_text(encoding="utf-8"))
    source = product_source()
    documented = {**annotation_keys(names), **reasons(names)}
    planned = [n for value, n in documented.items() if status_of(table[value]).startswith("not")]
    assert [n for n in planned if re.search(rf"\b{n}\b", source)] == []


def manifest() -> dict[str, Any]:
    loaded = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_downward_api_example_is_a_valid_pod(version: str) -> None:
    assert validate(manifest(), version) == []


def test_the_downward_api_example_projects_every_controller_written_key() -> None:
    pod = manifest()
    (volume,) = pod["spec"]["volumes"]
    projected = {}
    for item in volume["downwardAPI"]["items"]:
        match = FIELD_PATH.match(item["fieldRef"]["fieldPath"])
        assert match, item
        projected[match.group(1)] = item["path"]
    assert set(projected) == vocab.CONTROLLER_OWNED_ANNOTATIONS
    assert all(path == key.removeprefix(vocab.ANNOTATION_PREFIX) for key, path in projected.items())
    assert pod["metadata"]["labels"] == {vocab.GPU_CLASS_LABEL: "h100"}
    (container,) = pod["spec"]["containers"]
    assert vocab.GPU_RESOURCE in container["resources"]["limits"]


def test_an_invalid_manifest_is_refused() -> None:
    """Guard against a validator that accepts anything."""
    pod = manifest()
    pod["spec"]["volumes"][0]["downwardAPI"]["items"][0]["fieldRef"]["fieldPth"] = "x"
    assert validate(pod, KUBERNETES_VERSIONS[0]) != []


EXAMPLE_PODS = sorted(
    [
        *(ROOT / "docs" / "user" / "examples").glob("*.yaml"),
        *(ROOT / "sandbox" / "examples").glob("*.yaml"),
    ]
)


@pytest.mark.parametrize("path", EXAMPLE_PODS, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_every_example_gpu_pod_tolerates_its_class_pool(path: Path) -> None:
    """A GPU node carries its pool's ``gpu-class=<class>:NoSchedule`` taint beside the
    reservation taint: an example pod of a class without that toleration is admitted,
    holds GPUs and never schedules."""
    for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        if not doc or doc.get("kind") != "Pod":
            continue
        cls = (doc["metadata"].get("labels") or {}).get(vocab.GPU_CLASS_LABEL)
        if cls is None:
            continue
        wanted = {
            "key": vocab.GPU_CLASS_LABEL,
            "value": cls,
            "effect": vocab.TAINT_EFFECT_NO_SCHEDULE,
        }
        tolerations = doc["spec"].get("tolerations") or []
        assert any(
            {k: t.get(k) for k in wanted} == wanted and t.get("operator", "Equal") == "Equal"
            for t in tolerations
        ), (path.name, tolerations)

"""docs/operator/troubleshooting.md names only log events, alerts and Event reasons that exist."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from shared import vocab
from shared.logs import JsonFormatter

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "operator" / "troubleshooting.md").read_text(encoding="utf-8")
CATALOGUE = (ROOT / "docs" / "operator" / "observability.md").read_text(encoding="utf-8")
ALERTS = ROOT / "charts" / vocab.PRODUCT_NAME / "files" / "alerts.yaml"
LOG_EVENT = re.compile(r"`([a-z]+\.[a-z_]+)`")
ALERT = re.compile(r"`?(GpuReservation[A-Za-z]+)`?")
MERMAID = re.compile(r"```mermaid\n(.*?)```", re.DOTALL)


def test_every_log_event_named_is_catalogued() -> None:
    named = set(LOG_EVENT.findall(GUIDE))
    assert len(named) >= 20
    assert {e for e in named if f"`{e}`" not in CATALOGUE} == set()


def test_every_alert_named_exists() -> None:
    groups = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))["groups"]
    alerts = {r["alert"] for g in groups for r in g["rules"] if "alert" in r}
    named = set(ALERT.findall(GUIDE))
    assert len(named) >= 8
    assert named - alerts == set()


def test_the_lifecycle_diagram_uses_real_reasons_and_every_eviction_reason() -> None:
    (diagram,) = MERMAID.findall(GUIDE)
    assert diagram.startswith("stateDiagram-v2")
    reasons = {v for k, v in vars(vocab).items() if k.startswith("REASON_")}
    camel = set(re.findall(r"\b([A-Z][a-z]+(?:[A-Z][a-z]+)+)\b", diagram))
    states = set(re.findall(r"^\s*(\w+) -->", diagram, flags=re.MULTILINE))
    assert camel - reasons - states == set()
    stopping = {
        vocab.REASON_PREEMPTED,
        vocab.REASON_RESERVATION_CANCELLED,
        vocab.REASON_RESERVATION_REASSIGNED,
        vocab.REASON_UNADMITTED_TOLERATION,
        vocab.REASON_TERMINATION_WARNING,
    }
    assert {r for r in stopping if not re.search(rf"\b{r}\b", diagram)} == set()


def test_every_documented_log_grep_matches_a_real_log_line() -> None:
    """A ``grep '<pattern>'`` over our logs in the docs matches the line the formatter
    writes for an event of that prefix (it once searched for ``"event": "queue.``, a
    spacing the compact lines never have)."""
    greps = [
        (str(page.relative_to(ROOT)), pattern)
        for page in sorted((ROOT / "docs").rglob("*.md"))
        for pattern in re.findall(r"grep '([^']*\"event\"[^']*)'", page.read_text("utf-8"))
    ]
    assert greps, "no documented grep over the logs"
    for page, pattern in greps:
        prefix = re.search(r'"event"\s*:\s*"([a-z_.]+)', pattern)
        assert prefix is not None, (page, pattern)
        event = prefix[1] + ("x" if prefix[1].endswith(".") else "")  # "queue." → "queue.x"
        line = JsonFormatter().line(0.0, "INFO", "reconciler.queue.admit", event, {"pod": "p"})
        assert re.search(pattern, line), (page, pattern, line)

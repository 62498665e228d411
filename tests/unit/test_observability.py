"""Every log event name the product code writes is in the catalogue, docs/observability.md."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("shared", "webhook", "reconciler", "certs")
EVENT = re.compile(r"[a-z0-9_]+(\.[a-z0-9_]+)+")
LEVEL_METHODS = {"debug", "info", "warning", "error", "exception", "critical"}


def event_of(call: ast.Call) -> str | None:
    """The literal event of ``log(logger, level, "<event>", …)`` or ``_log.info("<event>")``."""
    func = call.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
    if name == "log" and len(call.args) >= 3:
        arg = call.args[2]
    elif name in LEVEL_METHODS and call.args:
        arg = call.args[0]
    else:
        return None
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and EVENT.fullmatch(arg.value):
        return arg.value
    return None


def events_in_code() -> dict[str, str]:
    found: dict[str, str] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and (event := event_of(node)):
                    found.setdefault(event, f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_every_log_event_is_catalogued() -> None:
    catalogue = (ROOT / "docs" / "observability.md").read_text(encoding="utf-8")
    missing = {e: where for e, where in events_in_code().items() if f"`{e}`" not in catalogue}
    assert missing == {}


def test_the_scan_finds_events() -> None:
    assert len(events_in_code()) > 50
    call = ast.parse('log(_log, logging.INFO, "queue.admitted", pod=p)').body[0]
    assert isinstance(call, ast.Expr)
    assert isinstance(call.value, ast.Call)
    assert event_of(call.value) == "queue.admitted"

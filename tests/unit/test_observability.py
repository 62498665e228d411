"""Every log event name the product code writes is in docs/operator/observability.md."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("shared", "webhook", "reconciler", "certs")
EVENT = re.compile(r"[a-z0-9_]+(\.[a-z0-9_]+)+")
LEVEL_METHODS = {"debug", "info", "warning", "error", "exception", "critical"}


#: A catalogue row: its events (first cell) and its "When" text (last cell).
ROW = re.compile(r"^\| (?P<events>`[^|]*) \|[^|]*\| (?P<when>.*) \|$")
#: A documented field: a backticked name in the row's closing parentheses, unless it is
#: a value (after ``: `` or ``= ``, as in "(`resource`: `gpureservations`)").
FIELD = re.compile(r"(?<!: )(?<!= )`([a-z_][a-z0-9_]*)`")


def events_of(call: ast.Call) -> list[str]:
    """The literal events of ``log(logger, level, <event>, …)`` or ``_log.info(<event>)``:
    every event-shaped string in that argument (``"a.x" if ok else "a.y"`` gives both)."""
    func = call.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
    if name == "log" and len(call.args) >= 3:
        arg = call.args[2]
    elif name in LEVEL_METHODS and call.args:
        arg = call.args[0]
    else:
        return []
    return [
        c.value
        for c in ast.walk(arg)
        if isinstance(c, ast.Constant) and isinstance(c.value, str) and EVENT.fullmatch(c.value)
    ]


def event_of(call: ast.Call) -> str | None:
    """The first literal event of the call, if any."""
    return next(iter(events_of(call)), None)


def log_calls() -> list[tuple[str, ast.Call, str]]:
    """(event, call, where) for every log call of the product code."""
    found: list[tuple[str, ast.Call, str]] = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Call):
                    where = f"{path.relative_to(ROOT)}:{node.lineno}"
                    found.extend((event, node, where) for event in events_of(node))
    return found


def events_in_code() -> dict[str, str]:
    found: dict[str, str] = {}
    for event, _, where in log_calls():
        found.setdefault(event, where)
    return found


def fields_in_code() -> dict[str, set[str] | None]:
    """The keyword fields each event is logged with; None when a call passes ``**``."""
    fields: dict[str, set[str] | None] = {}
    for event, call, _ in log_calls():
        known = fields.setdefault(event, set())
        names = {k.arg for k in call.keywords if k.arg is not None}
        spread = len(names) < len(call.keywords)
        fields[event] = None if known is None or spread else known | names
    return fields


def test_every_log_event_is_catalogued() -> None:
    catalogue = (ROOT / "docs" / "operator" / "observability.md").read_text(encoding="utf-8")
    missing = {e: where for e, where in events_in_code().items() if f"`{e}`" not in catalogue}
    assert missing == {}


def test_every_documented_field_is_logged() -> None:
    """A field the catalogue names in a row's closing parentheses is one the code logs
    for one of that row's events (``queue.admitted`` was documented with ``lag``, logged
    with ``since_open_s``)."""
    catalogue = (ROOT / "docs" / "operator" / "observability.md").read_text(encoding="utf-8")
    logged = fields_in_code()
    wrong = {}
    for line in catalogue.splitlines():
        row = ROW.match(line)
        closing = re.search(r"\(([^()]*)\)\s*$", row["when"]) if row else None
        if row is None or closing is None:
            continue
        events = [e for e in re.findall(r"`([a-z0-9_.]+)`", row["events"]) if e in logged]
        if not events or any(logged[e] is None for e in events):
            continue
        union = set().union(*(logged[e] or set() for e in events))
        unknown = [f for f in FIELD.findall(closing[1]) if f not in union]
        if unknown:
            wrong[" / ".join(events)] = unknown
    assert wrong == {}


def test_the_scan_finds_events() -> None:
    assert len(events_in_code()) > 50
    call = ast.parse('log(_log, logging.INFO, "queue.admitted", pod=p)').body[0]
    assert isinstance(call, ast.Expr)
    assert isinstance(call.value, ast.Call)
    assert event_of(call.value) == "queue.admitted"
    either = ast.parse('log(_log, logging.INFO, "c.written" if x else "c.kept")').body[0]
    assert isinstance(either, ast.Expr)
    assert isinstance(either.value, ast.Call)
    assert events_of(either.value) == ["c.written", "c.kept"]

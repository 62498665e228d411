"""Every environment variable a process reads is documented (docs/operator/configuration.md, or
docs/operator/certificates.md for the certificate command's CERTS_* variables)."""

from __future__ import annotations

import ast
from pathlib import Path

from shared.settings import EnvReader

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("shared", "webhook", "reconciler", "certs")
#: EnvReader methods whose first argument is a variable name.
READERS = {name for name in vars(EnvReader) if not name.startswith("_") and name not in {"check"}}


def variables_read() -> dict[str, str]:
    found: dict[str, str] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                    continue
                if node.func.attr not in READERS or not node.args:
                    continue
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    found.setdefault(first.value, f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_every_variable_read_is_documented() -> None:
    docs = "".join(
        (ROOT / "docs" / "operator" / name).read_text(encoding="utf-8")
        for name in ("configuration.md", "certificates.md")
    )
    missing = {v: where for v, where in variables_read().items() if f"`{v}`" not in docs}
    assert missing == {}


def test_the_scan_sees_the_settings_modules() -> None:
    found = variables_read()
    assert {"RESERVATION_API_URL", "LEDGER_CLAIM_TTL_SECONDS", "LOG_LEVEL"} <= set(found)

"""House rules of the webhook's and shared code's size, read from the source: a module
stays under 400 lines, and a function on the claim path takes few enough parameters
to be read at its call site (docs/developer/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("webhook", "shared", "certs")
#: The claim path: the webhook's engine and journal, and the ledger they write.
CLAIM_PATH = ("webhook/claims", "shared/ledger")
MODULE_LINES = 400
PARAMETERS = 5


def modules(*folders: str) -> list[Path]:
    return sorted(
        p
        for folder in folders
        for p in (ROOT / folder).rglob("*.py")
        if "__pycache__" not in p.parts
    )


def wide_functions(text: str) -> list[str]:
    """Functions of ``text`` taking more than ``PARAMETERS`` parameters, not counting
    ``self``/``cls`` and keyword-only tuning knobs with a default (the call site names
    them). Methods of a ``Protocol`` are exempt: they mirror an API we do not shape
    (the Kubernetes gateway's calls)."""
    found = []
    tree = ast.parse(text)
    protocols = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and any(getattr(base, "id", getattr(base, "attr", "")) == "Protocol" for base in node.bases)
    ]
    exempt = {id(f) for p in protocols for f in ast.walk(p)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or id(node) in exempt:
            continue
        args = node.args
        plain = [a.arg for a in args.posonlyargs + args.args if a.arg not in {"self", "cls"}]
        required_kw = [
            a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None
        ]
        if len(plain) + len(required_kw) > PARAMETERS:
            found.append(f"{node.name}: {len(plain) + len(required_kw)} parameters")
    return found


def test_no_module_of_the_webhook_or_shared_code_outgrows_a_reader() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {n} lines"
        for path in modules(*PACKAGES)
        if (n := len(path.read_text().splitlines())) > MODULE_LINES
    ]
    assert found == []


def test_claim_path_functions_take_few_parameters() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {what}"
        for path in modules(*CLAIM_PATH)
        for what in wide_functions(path.read_text())
    ]
    assert found == []


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("def f(a, b, c, d, e, g): pass", ["f: 6 parameters"]),
        ("def f(self, a, b, c, d, e): pass", []),
        ("def f(a, *, b, c, d, e, g): pass", ["f: 6 parameters"]),
        ("def f(a, b, c, d, e, *, knob=1, other=2): pass", []),
        ("class G(Protocol):\n    def f(self, a, b, c, d, e, g): ...", []),
        ("class G(typing.Protocol):\n    def f(self, a, b, c, d, e, g): ...", []),
        ("class G:\n    async def f(self, a, b, c, d, e, g): ...", ["f: 6 parameters"]),
    ],
)
def test_the_parameter_check_counts_what_a_caller_must_pass(source: str, found: list[str]) -> None:
    assert wide_functions(source) == found

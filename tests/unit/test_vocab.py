"""The vocabulary module is the only place its strings are written."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

from shared import vocab

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("shared", "webhook", "reconciler", "certs", "sandbox", "tests", "bench")
QUALIFIED_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


def vocabulary() -> dict[str, str]:
    return {
        name: value
        for name, value in vars(vocab).items()
        if name.isupper() and isinstance(value, str)
    }


def literal_uses() -> list[tuple[str, int, str]]:
    """Every string literal in our Python files that equals a vocabulary value.

    The scan runs in a fresh interpreter: CPython 3.11.7's ``ast.parse`` can fail with
    "AST constructor recursion depth mismatch" once another test has changed the
    recursion limit (fixed upstream in 3.11.8), and the scan must not depend on which
    tests ran before it.
    """
    result = subprocess.run(
        [sys.executable, "-c", _SCAN, str(ROOT), *SCANNED],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return [(str(f), int(n), str(v)) for f, n, v in json.loads(result.stdout)]


_SCAN = """
import ast, json, sys
from pathlib import Path
from shared import vocab
root = Path(sys.argv[1])
values = {v for k, v in vars(vocab).items() if k.isupper() and isinstance(v, str)}
found = []
for package in sys.argv[2:]:
    for path in sorted((root / package).rglob("*.py")):
        if path == root / "shared" / "vocab.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in values:
                found.append((str(path.relative_to(root)), node.lineno, node.value))
print(json.dumps(found))
"""


def test_no_vocabulary_string_is_written_outside_the_vocabulary_module() -> None:
    assert literal_uses() == []


def test_the_scan_would_see_a_literal(tmp_path: Path) -> None:
    """Guard against a scan that silently finds nothing (e.g. a wrong root)."""
    assert (ROOT / "shared" / "vocab.py").exists()
    source = f"X = {vocab.BOOKING_REFERENCE!r}\n"
    tree = ast.parse(source)
    assert any(
        isinstance(n, ast.Constant) and n.value == vocab.BOOKING_REFERENCE for n in ast.walk(tree)
    )


def test_every_value_is_unique() -> None:
    values = list(vocabulary().values())
    duplicates = {v for v in values if values.count(v) > 1}
    assert duplicates == set()


def test_annotation_and_label_keys_are_valid_qualified_names() -> None:
    keys = [
        *vocab.CONTROLLER_OWNED_ANNOTATIONS,
        vocab.MINIMUM_RUNTIME_SECONDS,
        vocab.USAGE_GROUP,
        vocab.RUNTIME_GUARANTEE,
        vocab.FORCE_NODE_CAPACITY,
        vocab.GPU_CLASS_LABEL,
        vocab.RESERVATION_TAINT_KEY,
        vocab.SANDBOX_RUN_SECONDS,
        vocab.SANDBOX_SCHEDULING_GATE,
    ]
    for key in keys:
        assert QUALIFIED_KEY.match(key), key
        assert len(key.split("/")[-1]) <= 63, key


def test_controller_owned_annotations_share_the_galends_prefix() -> None:
    assert all(k.startswith(vocab.ANNOTATION_PREFIX) for k in vocab.CONTROLLER_OWNED_ANNOTATIONS)
    user_keys = {vocab.MINIMUM_RUNTIME_SECONDS, vocab.USAGE_GROUP, vocab.RUNTIME_GUARANTEE}
    assert user_keys.isdisjoint(vocab.CONTROLLER_OWNED_ANNOTATIONS)


def test_event_reasons_are_camel_case_and_short() -> None:
    reasons = [v for k, v in vocabulary().items() if k.startswith("REASON_")]
    assert len(reasons) >= 18
    for reason in reasons:
        assert re.fullmatch(r"[A-Z][A-Za-z]+", reason), reason
        assert len(reason) <= 128
    assert set(vocab.WARNING_REASONS) <= set(reasons)


def test_crd_name_is_plural_dot_group() -> None:
    assert f"{vocab.CRD_PLURAL}.{vocab.CRD_GROUP}" == vocab.CRD_NAME

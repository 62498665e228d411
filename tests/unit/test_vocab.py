"""The vocabulary module is the only place its strings are written."""

from __future__ import annotations

import ast
import re
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
    values = set(vocabulary().values())
    found = []
    for package in SCANNED:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "shared" / "vocab.py":
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and node.value in values:
                    found.append((str(path.relative_to(ROOT)), node.lineno, node.value))
    return found


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

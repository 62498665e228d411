"""The denial a user reads when an UPDATE moves the class label of a held pod."""

from __future__ import annotations

import pytest

from shared import vocab
from webhook import wording


@pytest.mark.parametrize(
    ("held", "phrase"),
    [("admitted", "of an admitted pod"), ("queued", "of a queued pod")],
    ids=["admitted-takes-an", "queued-takes-a"],
)
def test_label_change_denial_reads_as_english(held: str, phrase: str) -> None:
    message = wording.label_change_denied(vocab.GPU_CLASS_LABEL, held)
    assert message == (
        f"the {vocab.GPU_CLASS_LABEL} label {phrase} cannot be changed or removed; "
        "delete and recreate it"
    )

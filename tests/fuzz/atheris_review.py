"""Coverage-guided fuzzing of the webhook's AdmissionReview parser with atheris.

``make fuzz-atheris`` installs atheris (the ``fuzz`` extra) and runs this for
``ATHERIS_RUNS`` inputs (default 100,000), starting from one valid review: every body
must parse to an ``AdmissionRequest`` or be refused with ``Malformed`` (HTTP 400); any
other exception is a crash, which atheris reports with the input that caused it
(keep it as an ``@example`` of ``tests/fuzz/test_entry_points.py``). Not collected by
pytest: atheris is not part of the dev dependencies.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.webhook.helpers import review
from webhook.review import AdmissionRequest, Malformed, parse


def one(body: bytes) -> None:
    """The property: a request or a ``Malformed``, never anything else."""
    try:
        got = parse(body)
    except Malformed:
        return
    assert isinstance(got, AdmissionRequest)


def seed() -> bytes:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "alice"}}
    return json.dumps(review(pod, uid="u-1")).encode()


def main() -> None:
    atheris: Any = importlib.import_module("atheris")
    runs = int(os.environ.get("ATHERIS_RUNS", "100000"))
    with tempfile.TemporaryDirectory() as corpus:
        Path(corpus, "valid.json").write_bytes(seed())
        argv = [sys.argv[0], f"-atheris_runs={runs}", *sys.argv[1:], corpus]
        atheris.instrument_all()  # the parser is imported already: instrument in place
        atheris.Setup(argv, one)
        atheris.Fuzz()


if __name__ == "__main__":
    main()

"""Where the checkout is: the working directory and ``PYTHONPATH`` of every process the
sandbox runs from it."""

from __future__ import annotations

from pathlib import Path

#: The repository's root (the directory holding ``sandbox/``).
ROOT = Path(__file__).resolve().parents[1]

"""Collects README.md and the pages under docs/ as tests (executable docs,
docs/developer/development.md); tests/conftest.py holds the suite's fixtures."""

pytest_plugins = ["tests.docs.plugin"]

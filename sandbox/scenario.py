"""Scenario files: the world the sandbox starts with.

A scenario is a YAML mapping. Each component reads its own sections (the Kubernetes
emulator ``namespaces`` and ``nodes``; the reservation-app emulator ``app``) and
validates them; this module only loads the file and rejects unknown sections.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

DEFAULT_SCENARIO = Path(__file__).parent / "scenarios" / "default.yaml"
KNOWN_SECTIONS = frozenset({"namespaces", "nodes", "app", "clock"})


def load_scenario(path: Path | None = None) -> dict[str, Any]:
    """Parse a scenario file (the built-in default when ``path`` is None)."""
    source = path or DEFAULT_SCENARIO
    try:
        data = yaml.safe_load(source.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read scenario {source}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ValueError(f"scenario {source} is not valid YAML: {exc}") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError(f"scenario {source} must be a mapping of sections")
    unknown = sorted(set(data) - KNOWN_SECTIONS)
    if unknown:
        raise ValueError(
            f"scenario {source} has unknown section(s) {unknown}; known: {sorted(KNOWN_SECTIONS)}"
        )
    return data

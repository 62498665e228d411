"""Scenario files: the world the sandbox starts with.

A scenario is a YAML mapping. Each component reads its own sections (the Kubernetes
emulator ``namespaces`` and ``nodes``; the reservation-app emulator ``app``) and
validates them; this module loads the file, rejects unknown sections and reads the
``clock`` section (``clock_of``): ``clock: {factor: 60}`` runs the sandbox's time 60
times faster than the wall clock (a booking an hour away opens in a minute).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from shared.clock import Clock, ScaledClock, SystemClock

DEFAULT_SCENARIO = Path(__file__).parent / "scenarios" / "default.yaml"
KNOWN_SECTIONS = frozenset({"namespaces", "nodes", "app", "clock"})
#: The fastest clock a scenario may ask for (an hour of sandbox time a wall second).
MAX_CLOCK_FACTOR = 3600.0


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
    try:
        clock_of(data)
    except ValueError as exc:
        raise ValueError(f"scenario {source}: {exc}") from None
    return data


def clock_of(scenario: dict[str, Any]) -> Clock:
    """The sandbox clock the ``clock`` section asks for: the system clock when absent;
    ``ValueError`` naming the field when it is malformed."""
    section = scenario.get("clock")
    if section is None:
        return SystemClock()
    if not isinstance(section, dict):
        raise ValueError("clock: must be a mapping such as {factor: 60}")
    unknown = sorted(set(section) - {"factor"})
    if unknown:
        raise ValueError(f"clock: unknown key(s) {unknown}; known: ['factor']")
    factor = section.get("factor", 1)
    if isinstance(factor, bool) or not isinstance(factor, int | float):
        raise ValueError(f"clock.factor: must be a number, got {factor!r}")
    if not (math.isfinite(factor) and 0 < factor <= MAX_CLOCK_FACTOR):
        raise ValueError(f"clock.factor: must be > 0 and <= {MAX_CLOCK_FACTOR:g}, got {factor!r}")
    return SystemClock() if factor == 1 else ScaledClock(float(factor))

"""The values a sandbox release is rendered with, layered as ``helm install`` layers them.

Layers, lowest first: the chart's ``values.yaml`` (the engine applies it), the
sandbox's own file ``sandbox/values.yaml``, the values the sandbox computes at start
(``computed``: the app emulator's URL, a scaled clock, a scheduling gate other than the
file's), then the user's ``--values FILE`` in the order given, then the user's
``--set`` expressions in the order given. As in Helm's ``MergeValues``, every file is
merged before any ``--set``, wherever the flags stand on the command line, and a later
layer wins: maps merge key by key, anything else is replaced.

``--set`` is parsed by Helm's own parser (``strvals``, through helm-python), so dotted
keys, ``a[0]=x``, ``{a,b}`` lists, ``\\,`` escapes and the type inference (``true``,
``1``, ``null``) are exactly helm's. Helm parses each ``--set`` *into* the values so far;
here each is parsed alone and then merged, with one rule for lists that does the same:
an index a ``--set`` names replaces that element, and the others keep theirs (a
``null`` at an index the expression does not name is a gap, not a value).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import helm_python as helm

Values = dict[str, Any]

#: The sandbox's own values (each one says why it differs from the chart's default).
SANDBOX_VALUES_FILE = Path(__file__).with_name("values.yaml")


class ValuesError(ValueError):
    """A values file or ``--set`` expression Helm refuses; the message is Helm's."""


def read_file(path: Path) -> Values:
    """A ``--values`` file as Helm reads it (YAML, a mapping; empty: nothing)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValuesError(f"open {path}: {exc.strerror or exc}") from None
    try:
        parsed: Any = helm.values_from_yaml(text)
    except helm.HelmError as exc:
        raise ValuesError(f"failed to parse {path}: {exc}") from None
    return dict(parsed or {})


def parse_set(expression: str) -> Values:
    """One ``--set`` expression, by Helm's parser."""
    try:
        return helm.parse_set_string(expression)
    except helm.HelmError as exc:
        raise ValuesError(f"failed parsing --set data: {exc}") from None


def merge_maps(base: Mapping[str, Any], top: Mapping[str, Any]) -> Values:
    """Helm's ``mergeMaps`` for ``--values`` files: maps merge, everything else replaces."""
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_maps(out[key], value)
        else:
            out[key] = value
    return out


def set_into(base: Mapping[str, Any], parsed: Mapping[str, Any]) -> Values:
    """What Helm's ``strvals.ParseInto`` leaves in ``base`` for one parsed ``--set``."""
    out = dict(base)
    for key, value in parsed.items():
        out[key] = _set_value(out.get(key), value)
    return out


def _set_value(current: Any, value: Any) -> Any:
    if isinstance(value, dict):
        return set_into(current if isinstance(current, dict) else {}, value)
    if isinstance(value, list) and isinstance(current, list):
        merged = list(current) + [None] * (len(value) - len(current))
        for index, item in enumerate(value):
            if item is not None:
                merged[index] = _set_value(merged[index], item)
        return merged
    return value


@dataclass(frozen=True)
class Layers:
    """Every layer of a release's values, kept so an upgrade can add to them."""

    sandbox: Values = field(default_factory=dict)
    computed: Values = field(default_factory=dict)
    #: The user's ``--values`` files at install, as read (in order).
    files: tuple[Values, ...] = ()
    #: The user's ``--set`` expressions at install, as written (in order).
    sets: tuple[str, ...] = ()
    #: Each upgrade's files and ``--set``s, in the order the upgrades ran.
    upgrades: tuple[tuple[tuple[Values, ...], tuple[str, ...]], ...] = ()

    def merged(self) -> Values:
        """The values handed to the chart (its defaults are applied by the engine). As
        ``helm upgrade --reuse-values`` does, an upgrade's files and ``--set``s go on
        top of everything before it: an earlier ``--set`` loses to a later file."""
        out: Values = {}
        for layer in (self.sandbox, self.computed):
            out = merge_maps(out, copy.deepcopy(layer))
        for files, sets in ((self.files, self.sets), *self.upgrades):
            for layer in files:
                out = merge_maps(out, copy.deepcopy(layer))
            for expression in sets:
                out = set_into(out, parse_set(expression))
        return out

    def plus(self, files: Sequence[Values] = (), sets: Sequence[str] = ()) -> Layers:
        """These layers with one upgrade's user values on top."""
        upgrade = (tuple(files), tuple(sets))
        return Layers(self.sandbox, self.computed, self.files, self.sets, (*self.upgrades, upgrade))

    def to_json(self) -> Values:
        return {
            "sandbox": self.sandbox,
            "computed": self.computed,
            "files": list(self.files),
            "sets": list(self.sets),
            "upgrades": [{"files": list(f), "sets": list(s)} for f, s in self.upgrades],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Layers:
        return cls(
            dict(data.get("sandbox") or {}),
            dict(data.get("computed") or {}),
            tuple(dict(f) for f in data.get("files") or ()),
            tuple(str(s) for s in data.get("sets") or ()),
            tuple(
                (
                    tuple(dict(f) for f in u.get("files") or ()),
                    tuple(str(s) for s in u.get("sets") or ()),
                )
                for u in data.get("upgrades") or ()
            ),
        )


def user_layers(
    files: Sequence[Path], sets: Sequence[str]
) -> tuple[tuple[Values, ...], tuple[str, ...]]:
    """Read the user's files and check their ``--set`` expressions (``ValuesError``)."""
    read = tuple(read_file(path) for path in files)
    for expression in sets:
        parse_set(expression)
    return read, tuple(sets)


def sandbox_values() -> Values:
    """The sandbox's own layer (``sandbox/values.yaml``)."""
    return read_file(SANDBOX_VALUES_FILE)

"""Executable docs: the shell and Python blocks of README.md and docs/ run as tests.

Every fenced block whose language is ``sh``, ``shell``, ``bash``, ``console`` or
``python`` is either *run* or *marked*:

- *marked*: its first line is a comment starting ``# not run here:`` followed by the
  reason (a real cluster, a registry, a GPU). The reader sees the mark on the page; the
  suite counts it and runs nothing.
- ``sh``/``shell``/``bash``: the block runs as one bash script (``-e``, ``-o pipefail``)
  in the page's terminal (``tests.docs.terminal``: a workspace laid out like a
  checkout, a fresh sandbox of the page's own); it must exit 0.
- ``console``: lines starting ``$ `` are commands (a line ending in ``\\`` continues);
  the lines after a command, up to the next one, are its expected output (stdout and
  stderr interleaved), compared by ``matches``. A command must exit 0, unless its
  output ends with a line ``[exit N]``: then it must exit N.
- ``python``: runs with the venv's interpreter, ``docs/user/examples`` importable.

Blocks of one page run in page order in one terminal; pages never share a sandbox.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass

from sybil import Document, Example, Region
from sybil.parsers.markdown.lexers import FencedCodeBlockLexer

from tests.docs.terminal import ROOT, Terminal

LANGUAGES = ("sh", "shell", "bash", "console", "python")
MARK = "# not run here:"
TERMINAL = "docs_terminal"  # the key of a page's Terminal in its Sybil namespace

# Placeholders an expected output may use for what differs from run to run.
PLACEHOLDERS = {
    "<age>": r"(?:\d+[smhd])+|<unknown>",
    "<time>": r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?: ?(?:UTC|Z|[+-]\d\d:?\d\d))?",
    "<uid>": r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
    "<port>": r"\d{2,5}",
    "<id>": r"[\w.-]+",
    "<n>": r"\d+",
}


@dataclass(frozen=True)
class Block:
    """One fenced block: its language and text, and the mark's reason if it has one."""

    language: str
    text: str

    @property
    def marked(self) -> str | None:
        first = self.text.lstrip().splitlines()[0] if self.text.strip() else ""
        return first[len(MARK) :].strip() if first.startswith(MARK) else None


@dataclass(frozen=True)
class Command:
    """A ``console`` command, the output the page shows for it and its exit status."""

    line: str
    expected: list[str]
    status: int = 0


def commands(console: str) -> list[Command]:
    """Split a ``console`` block into commands and their expected output."""
    found: list[Command] = []
    lines = console.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.startswith("$ "):
            raise ValueError(f"console output before any command: {line!r}")
        command = line[2:]
        while command.endswith("\\") and index + 1 < len(lines):
            index += 1
            command = command[:-1] + "\n" + lines[index]
        index += 1
        expected = []
        while index < len(lines) and not lines[index].startswith("$ "):
            expected.append(lines[index])
            index += 1
        while expected and not expected[-1].strip():
            expected.pop()
        status = re.fullmatch(r"\[exit (\d+)\]", expected[-1].strip()) if expected else None
        if status is not None:
            expected.pop()
        found.append(Command(command, expected, int(status[1]) if status else 0))
    return found


def _line_pattern(expected: str) -> re.Pattern[str]:
    parts = re.split(r"(…|<age>|<time>|<uid>|<port>|<id>|<n>)", " ".join(expected.split()))
    regex = "".join(
        ".*?"
        if part == "…"
        else f"(?:{PLACEHOLDERS[part]})"
        if part in PLACEHOLDERS
        else re.escape(part)
        for part in parts
    )
    return re.compile(regex)


def matches(expected: list[str], actual: str) -> bool:
    """Whether ``actual`` is what ``expected`` shows: runs of blanks compare as one
    blank, trailing blank lines are ignored; ``…`` inside a line stands for any text,
    a line of ``…`` alone for any number of lines, and ``<age>``, ``<time>``, ``<uid>``,
    ``<port>``, ``<id>``, ``<n>`` for a value of that kind."""
    want = list(expected)
    got = [" ".join(line.split()) for line in actual.rstrip("\n").splitlines()]
    while want and not want[-1].strip():
        want.pop()
    return _match(want, got)


def _match(want: list[str], got: list[str]) -> bool:
    if not want:
        return not got
    head = " ".join(want[0].split())
    if head == "…":
        return any(_match(want[1:], got[skip:]) for skip in range(len(got) + 1))
    return (
        bool(got)
        and _line_pattern(head).fullmatch(got[0]) is not None
        and _match(want[1:], got[1:])
    )


def evaluate(example: Example) -> str | None:
    """Run one block in its page's terminal; a failure message, or None."""
    block: Block = example.parsed
    if block.marked is not None:
        return None
    if block.language == "python":
        return _python(block.text)
    terminal: Terminal = example.namespace[TERMINAL]
    if block.language != "console":
        status, output = terminal.run(block.text)
        return None if status == 0 else f"exit status {status}:\n{output}"
    for command in commands(block.text):
        status, output = terminal.run(command.line)
        if status != command.status:
            return f"$ {command.line}\nexit status {status}, not {command.status}:\n{output}"
        if not matches(command.expected, output):
            shown = "\n".join(command.expected)
            return f"$ {command.line}\nexpected:\n{shown}\ngot:\n{output}"
    return None


def _python(text: str) -> str | None:
    done = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), "-c", text],
        cwd=ROOT / "docs" / "user" / "examples",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return None if done.returncode == 0 else f"exit status {done.returncode}:\n{done.stderr}"


class BlockParser:
    """The Sybil parser: every fenced block in ``LANGUAGES``, run by ``evaluate``."""

    def __init__(self) -> None:
        self.lexer = FencedCodeBlockLexer(language="|".join(LANGUAGES))

    def __call__(self, document: Document) -> Iterable[Region]:
        for region in self.lexer(document):
            region.parsed = Block(region.lexemes["language"], str(region.lexemes["source"]))
            region.evaluator = evaluate
            yield region


def setup(namespace: dict[str, object]) -> None:
    namespace[TERMINAL] = Terminal()


def teardown(namespace: dict[str, object]) -> None:
    terminal = namespace.pop(TERMINAL)
    assert isinstance(terminal, Terminal)
    terminal.close()

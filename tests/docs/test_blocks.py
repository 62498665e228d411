"""The executable-docs machinery itself: console blocks split into commands, outputs
compare with placeholders, and a broken documented command fails its example."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sybil import Document
from sybil.example import SybilFailure

from tests.docs import blocks
from tests.docs.terminal import Terminal


def test_console_block_splits_into_commands_outputs_and_exit_status() -> None:
    parsed = blocks.commands("$ echo a \\\n  b\na b\n\n$ false\n[exit 1]\n$ true\n")
    assert parsed == [
        blocks.Command("echo a \n  b", ["a b"], 0),
        blocks.Command("false", [], 1),
        blocks.Command("true", [], 0),
    ]


def test_console_output_before_any_command_is_refused() -> None:
    with pytest.raises(ValueError, match="before any command"):
        blocks.commands("output\n$ true\n")


@pytest.mark.parametrize(
    ("expected", "actual", "same"),
    [
        (["NAME  AGE", "a     <age>"], "NAME   AGE\na   12m3s\n", True),
        (["a <age>"], "a soon\n", False),
        (["pod/notebook-<id> created"], "pod/notebook-x7k2p created\n", True),
        (["until <time>"], "until 2026-12-05 01:22 UTC\n", True),
        (["at <time>"], "at 2026-12-04T23:22:27Z\n", True),
        (["uid <uid>"], "uid e6418818-a6f0-40b8-bb83-2de5b4709c6e\n", True),
        (["port <port>, <n> pods"], "port 52453, 3 pods\n", True),
        (["first", "…", "last"], "first\nx\ny\nlast\n", True),
        (["first", "…", "last"], "first\nlast\n", True),
        (["first", "…"], "first\n", True),
        (["says: … done"], "says: anything at all done\n", True),
        (["one"], "one\ntwo\n", False),
        (["one", "two"], "one\n", False),
        (["one", ""], "one\n\n", True),
        (["a.b"], "axb\n", False),
    ],
    ids=[
        "columns-realigned",
        "age-is-a-duration",
        "generated-name",
        "time-in-words",
        "time-rfc3339",
        "uid",
        "port-and-count",
        "ellipsis-lines",
        "ellipsis-no-lines",
        "ellipsis-at-end",
        "ellipsis-in-line",
        "extra-line",
        "missing-line",
        "trailing-blank",
        "dot-is-literal",
    ],
)
def test_output_matches_with_placeholders(expected: list[str], actual: str, same: bool) -> None:
    assert blocks.matches(expected, actual) is same


@pytest.fixture
def page(tmp_path: Path) -> Iterator[tuple[Path, Terminal]]:
    terminal = Terminal(with_sandbox=False)
    yield tmp_path / "page.md", terminal
    terminal.close()


def outcomes(path: Path, terminal: Terminal) -> list[str | None]:
    """Each block's failure message (None when it passed), in page order."""
    document = Document.parse(str(path), blocks.BlockParser())
    document.namespace[blocks.TERMINAL] = terminal
    found: list[str | None] = []
    for example in document.examples():
        try:
            example.evaluate()
            found.append(None)
        except SybilFailure as failure:
            found.append(str(failure))
    return found


def test_a_broken_documented_command_fails_and_a_marked_one_is_not_run(
    page: tuple[Path, Terminal],
) -> None:
    path, terminal = page
    path.write_text(
        "A log, then a reader greps it:\n\n"
        "```sh\n"
        'echo \'{"event":"queue.admitted","pod":"p"}\' > app.log\n'
        "export LOG=app.log\n"
        "```\n\n"
        "```console\n"
        '$ grep -c \'"event":"queue.admitted"\' $LOG\n'
        "1\n"
        "```\n\n"
        "The same page after the event was renamed in the docs but not in the code:\n\n"
        "```console\n"
        '$ grep -c \'"event":"queue.admited"\' $LOG\n'
        "1\n"
        "```\n\n"
        "```console\n"
        "$ echo three\n"
        "two\n"
        "```\n\n"
        "```sh\n"
        "# not run here: a real cluster\n"
        "false\n"
        "```\n\n"
        "```python\n"
        "import galends_checkpoint\n"
        "raise SystemExit(3)\n"
        "```\n",
        encoding="utf-8",
    )
    failures = outcomes(path, terminal)
    assert failures[:2] == [None, None]
    assert "exit status 1, not 0" in str(failures[2])
    assert "expected:\ntwo\ngot:\nthree" in str(failures[3])
    assert failures[4] is None  # marked: counted, never run
    assert "exit status 3" in str(failures[5])  # the helper imported; the status counts


def test_every_shell_or_python_block_in_the_docs_runs_or_is_marked() -> None:
    """No fenced block in a language the suite runs is silently left out: each one is
    an example (run, or marked on the page)."""
    from tests.docs import pages

    for path in pages.pages():
        document = Document.parse(str(path), blocks.BlockParser())
        fences = [
            line
            for line in path.read_text(encoding="utf-8").splitlines()
            if line.lstrip().startswith("```") and line.strip()[3:] in blocks.LANGUAGES
        ]
        assert len(list(document.examples())) == len(fences), path

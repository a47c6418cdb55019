"""The ``console`` blocks of the docs run, as a reader would type them, and print what
the page shows.

A ``console`` block is a session: each line starting with ``$ statekeeper`` is a command
(a line ending in ``\\`` continues on the next), and the lines up to the next command are
what it prints, stdout then stderr. ``...`` in the printed lines matches any text (ids
and times that differ on every run), and trailing spaces are ignored. A command that ends
with ``# exit N`` must exit ``N``; any other, 0. The blocks of one page run in order in a
fresh current directory holding ``examples/``, against one fresh database
(``STATEKEEPER_DB``), as the python blocks of a page share one namespace
(tests/test_docs.py)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from statekeeper.cli import main

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_EXIT = re.compile(r"\s+#\s*exit\s+(\d+)\s*$")


@dataclass(frozen=True)
class Command:
    line: int  # of the page, for the failure message
    words: list[str]  # after "statekeeper"
    exit: int
    expected: str


def commands(source: str, first_line: int) -> list[Command]:
    """The commands of one ``console`` block, each with what it prints."""
    found: list[Command] = []
    lines = source.splitlines()
    index = 0
    while index < len(lines):
        if not lines[index].startswith("$ "):
            raise AssertionError(f"line {first_line + index}: output before any command")
        start = index
        text = lines[index][2:]
        while text.endswith("\\"):
            index += 1
            text = text[:-1] + " " + lines[index].strip()
        index += 1
        output = []
        while index < len(lines) and not lines[index].startswith("$ "):
            output.append(lines[index].rstrip())
            index += 1
        status = _EXIT.search(text)
        words = shlex.split(text, comments=True)
        assert words[0] == "statekeeper", f"line {first_line + start}: not a statekeeper command"
        found.append(
            Command(
                line=first_line + start,
                words=words[1:],
                exit=int(status.group(1)) if status else 0,
                expected="\n".join(output).strip("\n"),
            )
        )
    return found


def matches(expected: str, printed: str) -> bool:
    """Whether ``printed`` is ``expected``, each ``...`` in it standing for any text."""
    pattern = ".*?".join(re.escape(part) for part in expected.split("..."))
    shown = "\n".join(line.rstrip() for line in printed.strip("\n").splitlines())
    return re.fullmatch(pattern, shown, re.DOTALL) is not None


def console_blocks(text: str) -> list[tuple[str, int]]:
    """Each ```` ```console ```` block of a page: its text, and the page line it starts on."""
    blocks = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        if lines[index].strip() == "```console":
            start = index + 1
            end = next(i for i in range(start, len(lines)) if lines[i].strip() == "```")
            blocks.append(("\n".join(lines[start:end]), start + 1))
            index = end
        index += 1
    return blocks


def _console_blocks(page: Path) -> list[tuple[str, int]]:
    return console_blocks(page.read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    "page", [p for p in PAGES if _console_blocks(p)], ids=lambda p: p.relative_to(ROOT).name
)
def test_console_blocks_print_what_the_page_shows(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.syspath_prepend(str(ROOT))  # graph references name examples.*
    monkeypatch.setenv("STATEKEEPER_DB", f"sqlite:///{tmp_path}/state.db")
    capsys.readouterr()
    for source, first_line in _console_blocks(page):
        for command in commands(source, first_line):
            code = main(command.words)
            out, err = capsys.readouterr()
            printed = out + err
            where = f"{page.name}:{command.line}: statekeeper {shlex.join(command.words)}"
            assert code == command.exit, f"{where} exited {code}\n{printed}"
            assert matches(command.expected, printed), f"{where} printed:\n{printed}"


def test_the_runner_reads_commands_outputs_and_exit_codes() -> None:
    block = "$ statekeeper show t1 \\\n    @3  # exit 3\nno ... here\n$ statekeeper threads\n"
    first, second = commands(block, 10)
    assert (first.line, first.words, first.exit, first.expected) == (
        10, ["show", "t1", "@3"], 3, "no ... here",
    )  # fmt: skip
    assert (second.line, second.words, second.exit, second.expected) == (
        13, ["threads"], 0, "",
    )  # fmt: skip
    assert matches("no ... here", "no checkpoint\n'x' here  \n")
    assert not matches("no ... here", "no checkpoint there")
    assert not matches("a", "a\nb")
    with pytest.raises(AssertionError, match="output before any command"):
        commands("printed\n$ statekeeper threads", 1)
    page = "text\n```console\n$ statekeeper threads\n```\n```sh\nstatekeeper x\n```\n"
    assert console_blocks(page) == [("$ statekeeper threads", 3)]

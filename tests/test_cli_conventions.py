"""The conventions of the ``statekeeper`` command: ``--version``, ``-q``/``-v``, shell
completion, an ``Examples:`` section in every ``--help``, and progress bars that appear on
a terminal only (never in a pipe, never with ``-q``)."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import pty
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from statekeeper.cli import EXIT, build_parser, main
from tests.test_cli import build_thread

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "memory" / "data"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
# what a progress bar leaves in its stream: a carriage return, tqdm's bar, a count
PROGRESS_LIKE = re.compile(r"\r|\d+/\d+|%\||it/s")


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def statekeeper(*argv: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "statekeeper", *argv],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=ROOT,
        check=False,
        **kwargs,
    )


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/state.db"
    build_thread(url, "t1")
    build_thread(url, "t2")
    return url


def _commands(
    parser: argparse.ArgumentParser, prefix: str = ""
) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[prefix + name] = sub
                found.update(_commands(sub, f"{prefix}{name} "))
    return found


# -- --version, -q, -v --------------------------------------------------------------------


def test_version_is_the_installed_one() -> None:
    done = statekeeper("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"statekeeper {importlib.metadata.version('statekeeper')}\n"


def test_verbose_says_what_was_opened_and_how_long_it_took(db: str, capsys: Any) -> None:
    code, out, err = cli(capsys, "-v", "threads", "--db", db)
    assert code == EXIT["ok"], err
    assert out.splitlines()[0].startswith("THREAD")  # stdout is unchanged
    lines = err.splitlines()
    assert re.fullmatch(
        r"statekeeper: opened sqlite:///\S+ with SqliteCheckpointer \(read-only\) in \d+ ms",
        lines[0],
    ), err
    assert re.fullmatch(r"statekeeper: threads took \d+\.\d+ s \(exit 0\)", lines[-1]), err
    # after the command name too, and read-write for a command that writes
    code, _, err = cli(capsys, "prune", "t1", "--db", db, "--yes", "--verbose")
    assert code == EXIT["ok"]
    assert "with SqliteCheckpointer (read-write)" in err


def test_quiet_leaves_only_errors_on_stderr(db: str, tmp_path: Path, capsys: Any) -> None:
    dump = tmp_path / "dump.jsonl"
    assert cli(capsys, "export", "--db", db, "-o", str(dump)) == (
        EXIT["ok"],
        "",
        "exported 2 threads (8 checkpoints, 14 writes)\n",
    )
    code, out, err = cli(capsys, "-q", "export", "--db", db, "-o", str(dump))
    assert (code, out, err) == (EXIT["ok"], "", "")
    code, out, err = cli(capsys, "export", "--db", db, "-q", "--json")
    assert (code, err) == (EXIT["ok"], "")
    assert out.startswith('{"format":"statekeeper-dump"')  # the result itself is unchanged
    code, _, err = cli(capsys, "-q", "history", "nope", "--db", db)
    assert code == EXIT["not_found"]
    assert err.startswith("statekeeper history: no thread 'nope'")  # errors still show


def test_quiet_and_verbose_together_are_bad_usage(db: str, capsys: Any) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["-q", "threads", "-v", "--db", db])
    assert stopped.value.code == EXIT["usage"]
    assert "-q/--quiet and -v/--verbose" in capsys.readouterr().err


# -- --help ---------------------------------------------------------------------------------


def test_every_command_help_ends_with_examples_of_that_command() -> None:
    commands = _commands(build_parser())
    assert "memory search" in commands
    for name, sub in commands.items():
        shown = sub.format_help()
        assert "\nExamples:\n" in shown, name
        examples = shown.split("\nExamples:\n", 1)[1].splitlines()
        assert examples, name
        assert all(line.startswith("  ") for line in examples), name
        assert any(f"statekeeper {name}" in line for line in examples), name
    assert "\nExamples:\n" in build_parser().format_help()


def test_help_imports_neither_progress_bars_nor_completion() -> None:
    code = (
        "import sys\n"
        "from statekeeper.cli import build_parser\n"
        "build_parser().format_help()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tqdm', 'shtab')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


# -- completion -----------------------------------------------------------------------------


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_the_completion_script_knows_every_command(shell: str, capsys: Any) -> None:
    code, script, err = cli(capsys, "completion", shell)
    assert code == EXIT["ok"], err
    for name in _commands(build_parser()):
        assert name.split()[-1] in script, (shell, name)
    for option in ("--dry-run", "--strategy", "--thread", "--json"):
        spelled = f"-l {option[2:]}" if shell == "fish" else option  # fish: complete -l NAME
        assert spelled in script, (shell, option)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completes_commands_and_options(capsys: Any) -> None:
    _, script, _ = cli(capsys, "completion", "bash")
    probe = (
        "source /dev/stdin; complete -p statekeeper >/dev/null || exit 9\n"
        'ask() { COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*";\n'
        '  COMP_POINT=${#COMP_LINE}; COMPREPLY=(); _shtab_statekeeper; echo "${COMPREPLY[*]}"; }\n'
        "ask statekeeper pru\nask statekeeper prune --dr\nask statekeeper memory st\n"
    )
    done = subprocess.run(
        ["bash", "-c", probe], input=script, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["prune", "--dry-run", "stats"]


# -- progress bars --------------------------------------------------------------------------


def test_nothing_progress_like_in_a_pipe(db: str, tmp_path: Path, capsys: Any) -> None:
    dump = tmp_path / "dump.jsonl"
    target = f"sqlite:///{tmp_path}/copy.db"
    runs = [
        ["export", "--db", db, "-o", str(dump)],
        ["import", str(dump), "--db", f"sqlite:///{tmp_path}/imported.db"],
        ["copy", db, target],
        ["verify", "--db", db],
        ["memory", "eval", str(DATA / "tiny.json")],
    ]
    for argv in runs:
        code, _, err = cli(capsys, *argv)
        assert code == EXIT["ok"], (argv, err)
        assert not PROGRESS_LIKE.search(err), (argv, err)
    # and as a real child process, stderr a pipe
    done = statekeeper("export", "--db", db, "-o", str(dump))
    assert done.returncode == 0, done.stderr
    assert done.stderr == "exported 2 threads (8 checkpoints, 14 writes)\n"


def test_migrate_draws_no_bar_in_a_pipe(tmp_path: Path, capsys: Any) -> None:
    db = f"sqlite:///{tmp_path}/state.db"
    question = '{"messages": [{"role": "user", "content": "Where is order 1042?"}]}'
    run = ["run", "examples.approval_agent:graph", "--input", question, "--db", db]
    assert cli(capsys, *run, "--thread", "a")[0] == EXIT["interrupted"]
    code, out, err = cli(capsys, "migrate", "--all", "--db", db)
    assert code == EXIT["ok"], err
    assert "up to date" in out
    assert not PROGRESS_LIKE.search(err), err


def _on_a_terminal(*argv: str) -> tuple[int, str]:
    """Run ``statekeeper argv`` with stderr on a pseudo-terminal; what it drew there."""
    leader, follower = pty.openpty()
    child = subprocess.Popen(
        [sys.executable, "-m", "statekeeper", *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=follower,
        env=ENV,
        cwd=ROOT,
    )
    os.close(follower)
    drawn = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        drawn += chunk
    os.close(leader)
    return child.wait(timeout=120), drawn.decode(errors="replace")


def test_a_progress_bar_on_a_terminal_and_none_with_quiet(db: str, tmp_path: Path) -> None:
    dump = tmp_path / "dump.jsonl"
    code, drawn = _on_a_terminal("export", "--db", db, "-o", str(dump))
    assert code == 0, drawn
    assert "export:" in drawn  # tqdm's bar: "export: 100%|██████████| 2/2 [...]"
    assert "2/2" in drawn
    assert "%|" in drawn
    assert drawn.rstrip().endswith("exported 2 threads (8 checkpoints, 14 writes)")
    assert json.loads(dump.read_text().splitlines()[0])["format"] == "statekeeper-dump"

    code, drawn = _on_a_terminal("-q", "export", "--db", db, "-o", str(dump))
    assert (code, drawn) == (0, "")

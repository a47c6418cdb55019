"""Every command of ``statekeeper`` against what a user gets wrong: a missing thread, a
bad checkpoint reference, a bad ``--input``, ``--json``, output into a closed pipe, and
storage that is read-only. Each cell checks the exit code of the documented table
(docs/cli.md, :data:`statekeeper.cli.EXIT`), that stderr is one short message and never
a traceback, and that a refused command left the storage exactly as it was (its
listing, and the bytes of every file).

The commands are read from the parser itself: a command added to ``statekeeper`` fails
:func:`test_every_command_is_in_the_matrix` until it has a row here, or a reason in
:data:`SKIPPED`. Cells run in-process through :func:`statekeeper.cli.main`, except the
closed pipe (a real process whose stdout is a pipe nobody reads) and the read-only mount
(one process in a mount namespace, for all commands).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from statekeeper.checkpointers import open_checkpointer
from statekeeper.cli import EXIT, build_parser, main
from tests.test_cli_storage import read_only_mounts

ROOT = Path(__file__).resolve().parent.parent
AGENT = "examples.approval_agent:graph"
QUESTION = json.dumps({"messages": [{"role": "user", "content": "Where is order 1042?"}]})
DATASET = ROOT / "tests" / "memory" / "data" / "tiny.json"
MISSING = "nobody-here"
# a checkpoint id as LangGraph writes them, that no thread holds
NO_CHECKPOINT = "1f000000-0000-6000-8000-000000000000"
BACKENDS = ("sqlite", "file")
# the memory commands read the store at --db, and a file:// checkpointer directory is
# not a memory store (that is bad usage, said in one line): on SQLite one database is both
STORE = ("sqlite",)


@dataclass(frozen=True)
class Row:
    """How a command is called in the matrix; ``{db}``, ``{checkpoint}`` (t1's newest),
    ``{dump}`` (a dump of another thread) and ``{out}`` (a path outside the storage)
    are filled in per case.

    ``ok``: its argv when it succeeds, and the exit code then; ``missing``: its argv
    naming a thread (or note) that does not exist; ``bad_ref``: naming a checkpoint no
    thread holds; ``writes``: whether it writes to ``--db`` (6 on read-only storage);
    ``prints``: whether it prints to stdout when it succeeds.
    """

    ok: tuple[str, ...]
    code: int = EXIT["ok"]
    missing: tuple[str, ...] | None = None
    bad_ref: tuple[str, ...] | None = None
    writes: bool = False
    prints: bool = True
    reads_db: bool = True
    backends: tuple[str, ...] = ("sqlite", "file")


ROWS: dict[str, Row] = {
    "run": Row(
        ("run", AGENT, "--thread", "new", "--input", QUESTION),
        code=EXIT["interrupted"],
        writes=True,
    ),
    "resume": Row(("resume", "t1", "--answer", "yes"), missing=("resume", MISSING), writes=True),
    "threads": Row(("threads",)),
    "history": Row(("history", "t1"), missing=("history", MISSING)),
    "show": Row(
        ("show", "t1"),
        missing=("show", MISSING),
        bad_ref=("show", "t1", "--checkpoint", NO_CHECKPOINT),
    ),
    "diff": Row(("diff", "t1"), missing=("diff", MISSING), bad_ref=("diff", "t1", NO_CHECKPOINT)),
    "fork": Row(
        ("fork", "t1", "{checkpoint}", "--to", "t2"),
        missing=("fork", MISSING, "{checkpoint}", "--to", "t2"),
        bad_ref=("fork", "t1", NO_CHECKPOINT, "--to", "t2"),
        writes=True,
    ),
    "copy": Row(
        ("copy", "{db}", "sqlite:///{out}/copy.db", "--thread", "t1"),
        missing=("copy", "{db}", "sqlite:///{out}/copy.db", "--thread", MISSING),
    ),
    "export": Row(("export",), missing=("export", "--thread", MISSING)),
    "import": Row(("import", "{dump}"), writes=True),
    "prune": Row(("prune", "t1", "--yes"), missing=("prune", MISSING, "--yes"), writes=True),
    "verify": Row(("verify",)),
    "migrate": Row(("migrate", "t1"), missing=("migrate", MISSING), writes=True),
    # a note search records the recall; opened read-only, it cannot, and says so
    "memory search": Row(("memory", "search", "order"), backends=STORE),
    "memory show": Row(
        ("memory", "show", "no-such-note"),
        code=EXIT["not_found"],
        missing=("memory", "show", "no-such-note", "--thread", MISSING),
        backends=STORE,
    ),
    "memory stats": Row(("memory", "stats"), backends=STORE),
    "memory export": Row(("memory", "export"), prints=False, backends=STORE),  # no notes
    "memory eval": Row(("memory", "eval", str(DATASET)), reads_db=False),
    "graph": Row(("graph", AGENT), reads_db=False),
    "completion": Row(("completion", "bash"), reads_db=False),
}

SKIPPED = {
    "memory": "a group: its subcommands are the rows",
    "demo": "a walkthrough on storage of its own (--workdir) that runs the CLI in child "
    "processes; tests/test_cli_runs.py runs it end to end",
    "ui": "a server that runs until stopped; tests/ui/ covers its errors and read-only mode",
}


def _leaves(parser: argparse.ArgumentParser, prefix: str = "") -> list[str]:
    found: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append(prefix + name)
                found += _leaves(sub, f"{prefix}{name} ")
    return found


COMMANDS = _leaves(build_parser())


def test_every_command_is_in_the_matrix() -> None:
    assert sorted(COMMANDS) == sorted([*ROWS, *SKIPPED])


def _parser(command: str) -> argparse.ArgumentParser:
    sub = build_parser()
    for word in command.split():
        sub = next(
            a.choices[word] for a in sub._actions if isinstance(a, argparse._SubParsersAction)
        )
    return sub


def _names_a_checkpoint(action: argparse.Action) -> bool:
    """An argument that names a checkpoint: ``checkpoint``/``--checkpoint``, a
    ``FROM``/``TO`` pair, or a ``--from``."""
    return "checkpoint" in action.dest or action.dest == "from_" or action.metavar == "TO"


def test_input_and_checkpoint_cells_cover_every_command_that_takes_them() -> None:
    """A command that takes ``--input`` has a bad-input cell (only ``run`` today); one
    with an argument that names a checkpoint has a bad-reference cell."""
    parsers = {name: _parser(name) for name in ROWS}
    takes_input = [
        n for n, p in parsers.items() if any("--input" in a.option_strings for a in p._actions)
    ]
    assert takes_input == ["run"]
    names_checkpoint = [n for n, p in parsers.items() if any(map(_names_a_checkpoint, p._actions))]
    assert names_checkpoint == [n for n, row in ROWS.items() if row.bad_ref is not None]


# -- the storage every case starts from --------------------------------------------------


@dataclass
class Store:
    root: Path  # everything the storage is, and nothing else
    url: str
    checkpoint: str
    dump: Path
    out: Path

    def argv(self, words: tuple[str, ...]) -> list[str]:
        fill = {
            "{db}": self.url,
            "{checkpoint}": self.checkpoint,
            "{dump}": str(self.dump),
        }
        filled = [fill.get(w, w.replace("{out}", str(self.out))) for w in words]
        return [*filled, "--db", self.url]


def _url(kind: str, root: Path) -> str:
    return f"sqlite:///{root}/state.db" if kind == "sqlite" else f"file://{root}/files"


def _quiet(*argv: str) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return main(list(argv))


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Per backend, a storage holding thread t1 waiting at the agent's approval, and a
    dump of another thread: built once, copied for every case."""
    sys.path.insert(0, str(ROOT))
    built: dict[str, Path] = {}
    for kind in BACKENDS:
        base = tmp_path_factory.mktemp(f"matrix-{kind}")
        store = base / "store"
        store.mkdir()
        url = _url(kind, store)
        code = _quiet("run", AGENT, "--db", url, "--thread", "t1", "--input", QUESTION)
        assert code == EXIT["interrupted"]
        other = f"sqlite:///{base}/other.db"
        code = _quiet("run", AGENT, "--db", other, "--thread", "elsewhere", "--input", QUESTION)
        assert code == EXIT["interrupted"]
        assert _quiet("export", "-o", str(base / "dump.jsonl"), "--db", other) == EXIT["ok"]
        built[kind] = base
    return built


def _fresh(templates: dict[str, Path], kind: str, tmp_path: Path) -> Store:
    base = tmp_path / kind
    shutil.copytree(templates[kind] / "store", base / "store")
    (base / "out").mkdir()
    url = _url(kind, base / "store")
    with open_checkpointer(f"{url}{'&' if '?' in url else '?'}mode=ro") as saver:
        newest = saver.get_tuple({"configurable": {"thread_id": "t1", "checkpoint_ns": ""}})
    assert newest is not None
    return Store(
        base / "store", url, newest.checkpoint["id"], templates[kind] / "dump.jsonl", base / "out"
    )


def snapshot(store: Store) -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    """The bytes of every file of the storage (SQLite's ``-shm`` index, and an empty
    ``-wal``, which a reader may leave, hold no data) and its listing of checkpoints."""
    files = {
        str(p.relative_to(store.root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(store.root.rglob("*"))
        if p.is_file()
        and not p.name.endswith("-shm")
        and not (p.name.endswith("-wal") and p.stat().st_size == 0)
    }
    url = store.url
    with open_checkpointer(f"{url}{'&' if '?' in url else '?'}mode=ro") as saver:
        listing = sorted(
            (
                t.config["configurable"]["thread_id"],
                t.config["configurable"]["checkpoint_ns"],
                t.config["configurable"]["checkpoint_id"],
            )
            for t in saver.list(None)
        )
    return files, listing


def call(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse's own usage errors
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def one_message(err: str) -> None:
    """One line on stderr, ``statekeeper COMMAND: ...``, that says why: no traceback."""
    assert "Traceback" not in err, err
    assert err.startswith("statekeeper "), err
    assert err.count("\n") == 1, err
    assert len(err) < 600, err


def _cases(cell: str) -> list[Any]:
    return [
        pytest.param(kind, name, id=f"{kind}-{name.replace(' ', '-')}")
        for kind in BACKENDS
        for name, row in ROWS.items()
        if row.reads_db and kind in row.backends and getattr(row, cell) is not None
    ]


# -- missing thread, bad reference, bad input: refused, nothing changed -----------------


@pytest.mark.parametrize(("kind", "name"), _cases("missing"))
def test_a_missing_thread_is_not_found_and_changes_nothing(
    templates: dict[str, Path], tmp_path: Path, kind: str, name: str
) -> None:
    store = _fresh(templates, kind, tmp_path)
    before = snapshot(store)
    words = ROWS[name].missing
    assert words is not None
    code, _, err = call(*store.argv(words))
    assert code == EXIT["not_found"], err
    one_message(err)
    assert MISSING in err or "no-such-note" in err
    assert snapshot(store) == before
    # with --json: the same error, as one JSON object
    code, _, err = call(*store.argv(words), "--json")
    error = json.loads(err)["error"]
    assert (code, error["exit"], error["code"]) == (EXIT["not_found"],) * 2 + ("not_found",)
    assert snapshot(store) == before


@pytest.mark.parametrize(("kind", "name"), _cases("bad_ref"))
def test_a_checkpoint_no_thread_holds_is_not_found_and_changes_nothing(
    templates: dict[str, Path], tmp_path: Path, kind: str, name: str
) -> None:
    store = _fresh(templates, kind, tmp_path)
    before = snapshot(store)
    words = ROWS[name].bad_ref
    assert words is not None
    code, _, err = call(*store.argv(words))
    assert code == EXIT["not_found"], err
    one_message(err)
    assert NO_CHECKPOINT in err
    assert snapshot(store) == before


BAD_INPUTS = ["[1, 2]", '"hi"', '{"nokey": 1}', "{not json", "@/no/such/file.json"]


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_bad_input_is_bad_usage_and_changes_nothing(
    templates: dict[str, Path], tmp_path: Path, kind: str
) -> None:
    store = _fresh(templates, kind, tmp_path)
    before = snapshot(store)
    for data in BAD_INPUTS:
        code, out, err = call(*store.argv(("run", AGENT, "--thread", "new", "--input", data)))
        assert code == EXIT["usage"], (data, err)
        assert "Traceback" not in err, err
        assert err.count("\n") <= 6, err  # the fields at fault, one line each
        assert out == ""
        assert snapshot(store) == before, data
        code, _, err = call(*store.argv(("run", AGENT, "--input", data)), "--json")
        assert json.loads(err)["error"]["code"] == "usage", err


# -- --json: what succeeds prints JSON ---------------------------------------------------


@pytest.mark.parametrize("name", [pytest.param(n, id=n.replace(" ", "-")) for n in ROWS])
def test_json_output_is_json(templates: dict[str, Path], tmp_path: Path, name: str) -> None:
    store = _fresh(templates, "sqlite", tmp_path)
    row = ROWS[name]
    code, out, err = call(*store.argv(row.ok), "--json")
    assert code == row.code, err
    assert "Traceback" not in err
    if code != EXIT["ok"] and code != EXIT["interrupted"]:
        assert json.loads(err)["error"]["exit"] == code
    elif name == "export" or name == "memory export":
        assert all(json.loads(line) is not None for line in out.splitlines())  # JSON Lines
    elif row.prints:
        json.loads(out)


# -- a closed pipe: a real process, its stdout a pipe nobody reads ----------------------

# One process runs every command (starting one per command would cost seconds each):
# before each, fd 1 becomes a fresh pipe whose reading end is closed, and sys.stdout a
# fresh buffered writer on it, so the command's first flush meets EPIPE as it would in a
# process of its own. After the command, stdout is flushed once more, as the interpreter
# does at exit: that must not fail either (it would print "Exception ignored").
PIPED = """
import contextlib, io, json, os, sys
from statekeeper.cli import main
results = []
for argv in json.loads(sys.argv[1]):
    read, write = os.pipe()
    os.close(read)
    kept = os.dup(1)
    os.dup2(write, 1)
    os.close(write)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        err.write("Exception ignored: BrokenPipeError at the last flush\\n")
    os.dup2(kept, 1)
    os.close(kept)
    results.append([code, err.getvalue()])
sys.stdout = sys.__stdout__
print(json.dumps(results))
"""


def test_output_into_a_closed_pipe_exits_quietly(
    templates: dict[str, Path], tmp_path: Path
) -> None:
    names = list(ROWS)
    commands = [
        _fresh(templates, "sqlite", tmp_path / name.replace(" ", "-")).argv(ROWS[name].ok)
        for name in names
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    env.pop("STATEKEEPER_DB", None)
    done = subprocess.run(
        [sys.executable, "-c", PIPED, json.dumps(commands)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    results = json.loads(done.stdout.splitlines()[-1])
    for name, (code, err) in zip(names, results, strict=True):
        row = ROWS[name]
        if row.code not in (EXIT["ok"], EXIT["interrupted"]):
            expected = row.code  # a refusal is said on stderr; stdout is not written
            one_message(err)
        else:
            expected = EXIT["closed_pipe"] if row.prints else row.code
            # nothing but a command's own note on stderr ("exported 0 items")
            assert "Traceback" not in err, (name, err)
            assert "Exception" not in err, (name, err)
            assert err.count("\n") <= 1, (name, err)
        assert code == expected, (name, code, err)


# -- read-only storage: a read-only mount, one process for every command -----------------

MOUNTED = """
import contextlib, io, json, sys
from statekeeper.cli import main
results = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    results.append([code, err.getvalue()])
print(json.dumps(results))
"""


@pytest.mark.parametrize("kind", BACKENDS)
def test_on_a_read_only_mount_reads_work_and_writes_exit_6(
    templates: dict[str, Path], tmp_path: Path, kind: str
) -> None:
    if not read_only_mounts(tmp_path):
        if os.environ.get("CI") == "true":
            pytest.fail("read-only bind mounts (unshare -rm) must work under CI")
        pytest.skip("read-only bind mounts need unshare -rm, which is not available here")
    store = _fresh(templates, kind, tmp_path)
    before = snapshot(store)
    names = [name for name, row in ROWS.items() if row.reads_db and kind in row.backends]
    commands = [store.argv(ROWS[name].ok) for name in names]
    done = subprocess.run(
        [
            "unshare",
            "-rm",
            "sh",
            "-c",
            'mount --bind -o ro "$1" "$1" && exec "$2" -c "$3" "$4"',
            "sh",
            str(store.root),
            sys.executable,
            MOUNTED,
            json.dumps(commands),
        ],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *sys.path])),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.splitlines()[-1])
    for name, (code, err) in zip(names, results, strict=True):
        row = ROWS[name]
        if row.writes:
            assert code == EXIT["read_only"], (name, code, err)
            one_message(err)
            assert "read-only" in err, (name, err)
        else:
            assert code == row.code, (name, code, err)
            assert "Traceback" not in err, (name, err)
    assert snapshot(store) == before

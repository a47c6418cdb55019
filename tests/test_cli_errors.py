"""What a user who gets something wrong meets: a bad ``run --input`` refused before
anything is stored, errors as one JSON object under ``--json``, one not-found wording,
paths named in ``OSError``s, a closed pipe that exits quietly, and ids escaped in tables."""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from statekeeper._console import escape
from statekeeper.checkpointers import open_checkpointer
from statekeeper.cli import EXIT, main
from statekeeper.cli._report import describe
from statekeeper.errors import CorruptCheckpointError, Damage, ReadOnlyError

ROOT = Path(__file__).resolve().parent.parent
AGENT = "examples.approval_agent:graph"
QUESTION = {"messages": [{"role": "user", "content": "Where is order 1042?"}]}
_QUESTION = json.dumps(QUESTION)


@pytest.fixture(autouse=True)
def _importable_examples(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))


def _start(capsys: pytest.CaptureFixture[str], db: str, thread: str = "t") -> None:
    code, _, err = _cli(capsys, "run", AGENT, "--db", db, "--thread", thread, "--input", _QUESTION)
    assert code == EXIT["interrupted"], err


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "data",
    ["[1, 2]", '"hi"', '{"nokey": 1}', '{"messages": [{"role": "user", "content": NaN}]}'],
    ids=["list", "string", "unknown-key", "nan"],
)
def test_a_bad_input_is_a_usage_error_and_creates_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, data: str
) -> None:
    db = tmp_path / "state.db"
    code, out, err = _cli(capsys, "run", AGENT, "--db", f"sqlite:///{db}", "--input", data)
    assert code == EXIT["usage"]
    assert "Traceback" not in err
    assert err.count("\n") <= 6, err
    assert out == ""
    assert list(tmp_path.iterdir()) == []  # no database, no claim file


def test_an_unknown_key_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/state.db"
    code, _, err = _cli(capsys, "run", AGENT, "--db", db, "--input", '{"nokey": 1}')
    assert code == EXIT["usage"]
    assert "nokey" in err


def test_input_from_a_file_and_from_stdin(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = f"sqlite:///{tmp_path}/state.db"
    source = tmp_path / "input.json"
    source.write_text(json.dumps(QUESTION))
    code, _, err = _cli(capsys, "run", AGENT, "--db", db, "--thread", "f", "--input", f"@{source}")
    assert code == EXIT["interrupted"], err
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(QUESTION)))
    code, _, err = _cli(capsys, "run", AGENT, "--db", db, "--thread", "s", "--input", "-")
    assert code == EXIT["interrupted"], err
    with open_checkpointer(db) as saver:
        threads = {t.config["configurable"]["thread_id"] for t in saver.list(None)}
    assert threads == {"f", "s"}


def test_json_errors_are_one_object_with_a_stable_code(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path}/state.db"
    _start(capsys, db)
    code, _, err = _cli(capsys, "--json", "history", "missing", "--db", db)
    assert code == EXIT["not_found"]
    error = json.loads(err)["error"]
    assert error["exit"] == EXIT["not_found"]
    assert error["code"] == "not_found"
    assert "missing" in error["message"]


def test_history_limit_zero_is_a_usage_error_not_a_missing_thread(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path}/state.db"
    _start(capsys, db)
    with pytest.raises(SystemExit) as stopped:  # argparse's own usage error
        main(["history", "t", "--limit", "0", "--db", db])
    assert stopped.value.code == EXIT["usage"]
    err = capsys.readouterr().err
    assert "at least 1" in err
    assert "no thread" not in err


def test_export_into_a_directory_names_the_path(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path}/state.db"
    _start(capsys, db)
    code, _, err = _cli(capsys, "export", "-o", str(tmp_path), "--db", db)
    assert code in (EXIT["usage"], EXIT["failed"])
    assert str(tmp_path) in err
    assert "Traceback" not in err


def test_output_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/state.db"
    with open_checkpointer(db) as saver:
        for index in range(300):
            config: Any = {"configurable": {"thread_id": f"t{index}", "checkpoint_ns": ""}}
            saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
    command = f"{sys.executable} -m statekeeper threads --json --db {db} | head -c 10"
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True, cwd=ROOT
    )
    assert done.stderr == "", done.stderr
    assert done.returncode in (0, EXIT.get("closed_pipe", 141))


def test_bidi_and_control_characters_are_escaped() -> None:
    assert escape("abc\u202edef") == "abc\\u202edef"
    assert escape("a\x1b[31mb") == "a\\x1b[31mb"
    assert escape("plain id") == "plain id"


# -- hostile input: one line, the right exit code, nothing stored -------------------------


def _one_line(err: str) -> None:
    assert "Traceback" not in err
    assert err.count("\n") == 1, err


@pytest.mark.parametrize("option", ["--input", "--answer"])
def test_json_nested_too_deeply_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, option: str
) -> None:
    """The rule ``import`` follows for a dump line: refused, not a RecursionError."""
    db = f"sqlite:///{tmp_path}/state.db"
    _start(capsys, db)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    command = ["run", AGENT] if option == "--input" else ["resume", "t"]
    before = _history(capsys, db, "t")
    code, out, err = _cli(capsys, *command, option, f"@{deep}", "--db", db)
    assert (code, out) == (EXIT["usage"], "")
    _one_line(err)
    assert "nests arrays or objects too deeply" in err
    code, _, err = _cli(capsys, "--json", *command, option, f"@{deep}", "--db", db)
    assert code == EXIT["usage"]
    assert "too deeply" in json.loads(err)["error"]["message"]
    assert _history(capsys, db, "t") == before
    assert _threads(capsys, db) == ["t"]


def _history(capsys: pytest.CaptureFixture[str], db: str, thread: str) -> list[Any]:
    code, out, err = _cli(capsys, "history", thread, "--db", db, "--json")
    assert code == EXIT["ok"], err
    return json.loads(out)  # type: ignore[no-any-return]


def _threads(capsys: pytest.CaptureFixture[str], db: str) -> list[str]:
    code, out, err = _cli(capsys, "threads", "--db", db, "--json")
    assert code == EXIT["ok"], err
    return [row["thread_id"] for row in json.loads(out)]


@pytest.mark.parametrize(
    "argv",
    [
        ["run", AGENT, "--input", '{"messages": [{"role": "user", "content": "\\ud800"}]}'],
        ["run", AGENT, "--input", '"\\udfff"'],
        ["resume", "t", "--answer", '{"approved": "\\ud800"}'],
        ["resume", "t", "--answer", "\udcff"],  # a byte that is not UTF-8, from argv
    ],
)
def test_a_lone_surrogate_is_bad_usage_said_for_the_command_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str]
) -> None:
    db = f"sqlite:///{tmp_path}/state.db"
    _start(capsys, db)
    before = _history(capsys, db, "t")
    code, out, err = _cli(capsys, *argv, "--db", db)
    assert (code, out) == (EXIT["usage"], "")
    _one_line(err)
    assert "lone surrogate" in err
    assert "str.encode" not in err  # the library's advice to Python callers
    assert _history(capsys, db, "t") == before
    assert _threads(capsys, db) == ["t"]


@pytest.mark.parametrize(
    "argv",
    [
        ["run", AGENT, "--input", "@"],
        ["resume", "t", "--answer", "@"],
        ["export", "-o", ""],
        ["import", ""],
        ["graph", AGENT, "-o", ""],
    ],
)
def test_an_empty_path_is_no_file_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str]
) -> None:
    db = f"sqlite:///{tmp_path}/state.db"
    _start(capsys, db)
    code, out, err = _cli(capsys, *argv, "--db", db)
    assert (code, out) == (EXIT["usage"], "")
    _one_line(err)
    assert "no file named" in err
    assert "is a directory" not in err


@pytest.mark.parametrize(
    "argv", [["run", AGENT, "--input", "-"], ["resume", "t", "--answer", "-"], ["import", "-"]]
)
def test_reading_a_closed_stdin_is_bad_usage(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
) -> None:
    db = f"sqlite:///{tmp_path}/state.db"
    _start(capsys, db)
    monkeypatch.setattr(sys, "stdin", None)  # what Python makes of `<&-`
    code, _, err = _cli(capsys, *argv, "--db", db)
    assert code == EXIT["usage"]
    _one_line(err)
    assert "stdin is closed" in err


def test_a_dump_that_is_not_utf8_names_the_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    target = tmp_path / "target.db"
    dump = (ROOT / "examples" / "approval_thread.jsonl").read_bytes()
    lines = dump.splitlines(keepends=True)
    cases = {
        b"\x89PNG\r\n\x1a\n\x00\xff": 1,
        dump.decode().encode("utf-16"): 1,
        b"".join([*lines[:3], b"\xff" + lines[3], *lines[4:]]): 4,
    }
    for index, (data, line) in enumerate(cases.items()):
        path = tmp_path / f"{index}.jsonl"
        path.write_bytes(data)
        code, out, err = _cli(capsys, "import", str(path), "--db", f"sqlite:///{target}")
        assert (code, out) == (EXIT["failed"], ""), err
        _one_line(err)
        assert f"dump line {line}: not UTF-8 text" in err
    assert not target.exists()


def test_a_dump_from_a_stream_that_is_not_utf8_is_one_line() -> None:
    """A stream decoding strictly fails ahead of the line it returns: the line named is
    where the bad bytes were met, or before them."""
    from statekeeper.errors import SerializationError
    from statekeeper.transfer import check_dump

    dump = (ROOT / "examples" / "approval_thread.jsonl").read_bytes()
    stream = io.TextIOWrapper(io.BytesIO(dump.replace(b"{", b"\xff{", 1)), encoding="utf-8")
    said = r"^dump line 1 \(or one soon after\): not UTF-8 text"
    with pytest.raises(SerializationError, match=said), check_dump(stream):
        pass


@pytest.mark.parametrize("limit", ["99999999999999999999999", "9" * 5000, str(2**63 - 1)])
@pytest.mark.parametrize("command", ["threads", "history"])
def test_a_limit_past_any_count_limits_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, limit: str, command: str
) -> None:
    db = f"sqlite:///{tmp_path}/state.db"
    _start(capsys, db)
    argv = [command, "t"] if command == "history" else [command]
    code, out, err = _cli(capsys, *argv, "--limit", limit, "--db", db, "--json")
    assert code == EXIT["ok"], err
    assert len(json.loads(out)) == (1 if command == "threads" else len(_history(capsys, db, "t")))


@pytest.mark.parametrize(
    "argv", [["history", "t"], ["show", "t"], ["diff", "t"], ["show", "t", "@1"]]
)
def test_a_missing_namespace_is_not_a_missing_thread(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str]
) -> None:
    db = f"sqlite:///{tmp_path}/state.db"
    _start(capsys, db)
    code, out, err = _cli(capsys, *argv, "--ns", "nosuch", "--db", db)
    assert (code, out) == (EXIT["not_found"], "")
    _one_line(err)
    assert "no namespace 'nosuch' in thread 't'" in err
    assert "it has '' (the root graph)" in err
    assert "no thread" not in err
    code, _, err = _cli(capsys, argv[0], "nope", *argv[2:], "--ns", "nosuch", "--db", db)
    assert code == EXIT["not_found"]
    assert "no thread 'nope'" in err


# -- stdout that cannot be written, stderr closed: real processes -------------------------


def _statekeeper(*argv: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "statekeeper", *argv],
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
        **kwargs,
    )


def test_version_into_a_closed_pipe_exits_quietly() -> None:
    read, write = os.pipe()
    os.close(read)
    try:
        done = _statekeeper("--version", stdout=write)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (EXIT["closed_pipe"], "")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize(
    "argv",
    [["--version"], ["--help"], ["threads", "--help"], ["threads"], ["export"], ["history", "t"]],
)
def test_a_full_stdout_is_one_line_and_exit_1(tmp_path: Path, argv: list[str]) -> None:
    db = f"sqlite:///{tmp_path}/state.db"
    with open_checkpointer(db) as saver:
        config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
    storage = [] if argv[0].startswith("--") else ["--db", db]
    with Path("/dev/full").open("w") as full:
        done = _statekeeper(*argv, *storage, stdout=full)
    assert done.returncode == EXIT["failed"], done.stderr
    _one_line(done.stderr)
    assert "cannot write to stdout: No space left on device" in done.stderr


def test_a_closed_stdout_does_nothing_and_says_so(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/state.db"
    for argv in (
        ["run", AGENT, "--thread", "t", "--input", _QUESTION, "--db", db],
        ["--json", "threads", "--db", db],
        ["--version"],
    ):
        done = _statekeeper(*argv, stdout=subprocess.DEVNULL, preexec_fn=lambda: os.close(1))
        assert done.returncode == EXIT["usage"], done.stderr
        _one_line(done.stderr)
        assert "stdout is closed" in done.stderr
    assert list(tmp_path.iterdir()) == []  # the run did not run


def test_a_closed_stderr_never_mixes_messages_into_stdout(tmp_path: Path) -> None:
    """With stderr closed, ``export``'s summary went to stdout, after the dump's trailer."""
    db = f"sqlite:///{tmp_path}/state.db"
    with open_checkpointer(db) as saver:
        config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})

    def without_stderr(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "statekeeper", *argv, "--db", db],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            check=False,
            preexec_fn=lambda: os.close(2),
        )

    done = without_stderr("export")
    assert done.returncode == EXIT["ok"]
    assert json.loads(done.stdout.splitlines()[-1])["kind"] == "end"
    for argv in (["history", "nope"], ["threads", "--limit", "0"]):
        done = without_stderr(*argv)
        assert done.returncode in (EXIT["not_found"], EXIT["usage"])
        assert done.stdout == ""


# -- the library's damage and read-only errors, said for the command line -----------------

_API_ADVICE = ("verify()", "verify(", "on_corrupt='fallback'", "claim_thread", "Checkpointer(")


def test_damage_is_said_with_the_commands_that_deal_with_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"file://{tmp_path}/files"
    assert main(["--db", url, "import", str(ROOT / "examples" / "approval_thread.jsonl")]) == 0
    (victim,) = (tmp_path / "files").rglob("checkpoints")  # the thread's checkpoint index
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01  # inside a committed line: its checksum no longer matches
    victim.write_bytes(bytes(data))
    capsys.readouterr()
    for argv in (["show", "t1"], ["history", "t1"], ["resume", "t1", "--answer", "yes"]):
        code, out, err = _cli(capsys, *argv, "--db", url)
        assert (code, out) == (EXIT["failed"], ""), err
        _one_line(err)
        assert "of thread 't1' in " in err
        assert "is damaged: " in err
        assert f"[{victim}]" in err
        assert f"run `statekeeper verify --db {url}` to list the damage" in err
        assert "add ?on_corrupt=fallback to the URL to skip it" in err
        assert not any(api in err for api in _API_ADVICE), err
    code, out, _ = _cli(capsys, "show", "t1", "--db", f"{url}?on_corrupt=fallback")
    assert code == EXIT["ok"]  # the advice works
    with open_checkpointer(url) as saver, pytest.raises(CorruptCheckpointError) as raised:
        saver.get_tuple({"configurable": {"thread_id": "t1", "checkpoint_ns": ""}})
    assert "verify(" in str(raised.value)  # the library keeps its advice to Python callers


def test_damage_known_only_in_part_is_said_from_what_is_known() -> None:
    damage = Damage("checksum mismatch", thread_id="t\x1b", checkpoint_ns="sub", path="row 7")
    exc = CorruptCheckpointError("... run verify() ...", damage)
    args = argparse.Namespace(command="show", db="sqlite:///x.db?timeout=5")
    said = describe(exc, args)
    assert said.startswith("a record of thread 't\\x1b' (namespace 'sub') in sqlite:///x.db")
    assert "is damaged: checksum mismatch [row 7]" in said
    assert "`statekeeper verify --db 'sqlite:///x.db?timeout=5'`" in said
    assert "add &on_corrupt=fallback to the URL" in said  # the URL has options already


def test_a_write_to_read_only_storage_says_why_it_is_read_only(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path}/state.db"
    _start(capsys, db)
    for argv in (["resume", "t", "--answer", "yes"], ["prune", "t", "-y"], ["verify", "--repair"]):
        code, out, err = _cli(capsys, *argv, "--db", f"{db}?mode=ro")
        assert (code, out) == (EXIT["read_only"], ""), err
        _one_line(err)
        assert f"{db}?mode=ro is open read-only, so nothing was written" in err
        assert "its URL says mode=ro" in err
        assert not any(api in err for api in _API_ADVICE), err
    with open_checkpointer(f"{db}?mode=ro") as saver, pytest.raises(ReadOnlyError) as raised:
        saver.claim_thread("t").__enter__()
    assert "cannot claim_thread" in str(raised.value)  # the library's own message stays


@pytest.mark.parametrize(
    ("command", "url", "why"),
    [
        ("prune", "sqlite:///ro/state.db", "its files are not writable"),
        ("prune", "file:///ro/files", "its files are not writable"),
        ("prune", "redis://replica:6379/0", "the server refuses writes (READONLY replica)"),
        ("copy", "postgres://db/x?mode=ro", "its URL says mode=ro"),
        ("memory", "sqlite:///notes.db?mode=ro", "its URL says mode=ro"),
    ],
)
def test_why_storage_is_read_only(command: str, url: str, why: str) -> None:
    exc = ReadOnlyError("cannot put: SqliteCheckpointer('/ro/state.db') is open read-only")
    exc.__cause__ = Exception("READONLY replica\nmore detail")
    args = argparse.Namespace(command=command, db=url, source="memory://", target=url, store=url)
    said = describe(exc, args)
    assert said.startswith(f"{url} is open read-only, so nothing was written: {why}")
    assert not any(api in said for api in _API_ADVICE), said

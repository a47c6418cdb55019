"""The ``statekeeper`` command, called in-process through ``main(argv)``; the demo and
``python -m statekeeper`` run as real child processes."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import io
import itertools
import json
import operator
import subprocess
import sys
import uuid
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, NamedTuple, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from pydantic import BaseModel

from statekeeper.checkpointers import open_checkpointer
from statekeeper.cli import EXIT, main

ROOT = Path(__file__).resolve().parent.parent


class Steps(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    ok: Any


def _step(name: str) -> Any:
    return lambda state: {"log": [name]}


def _approve(state: Steps) -> dict[str, Any]:
    return {"ok": interrupt("ok?")}


def build_thread(url: str, thread_id: str) -> None:
    """One thread: a -> b -> approve (interrupted)."""
    builder = StateGraph(Steps)
    builder.add_node("a", _step("a"))
    builder.add_node("b", _step("b"))
    builder.add_node("approve", _approve)
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", "approve")
    builder.add_edge("approve", END)
    with open_checkpointer(url) as saver:
        graph = builder.compile(checkpointer=saver)
        graph.invoke({"log": []}, {"configurable": {"thread_id": thread_id}})


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/state.db"
    build_thread(url, "t1")
    build_thread(url, "t2")
    return url


def test_threads_lists_every_thread_with_its_status(db: str, capsys: Any) -> None:
    code, out, _ = run(capsys, "threads", "--db", db)
    assert code == EXIT["ok"]
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["THREAD", "STATUS", "NEXT"]
    assert [line.split()[:3] for line in lines[1:]] == [
        ["t2", "interrupted", "approve"],
        ["t1", "interrupted", "approve"],
    ]


def test_threads_json_and_db_from_environment(
    db: str, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STATEKEEPER_DB", db)
    code, out, _ = run(capsys, "threads", "--json")
    assert code == EXIT["ok"]
    rows = json.loads(out)
    assert [(r["thread_id"], r["status"], r["next"]) for r in rows] == [
        ("t2", "interrupted", ["approve"]),
        ("t1", "interrupted", ["approve"]),
    ]


def test_threads_pages_with_limit_and_after_and_filters_by_status(db: str, capsys: Any) -> None:
    build_thread(db, "t3")
    ids = lambda *argv: [r["thread_id"] for r in json.loads(run(capsys, *argv)[1])]  # noqa: E731
    assert ids("--db", db, "--json", "threads", "--limit", "2") == ["t3", "t2"]
    assert ids("--db", db, "--json", "threads", "--after", "t2") == ["t1"]
    assert ids("--db", db, "--json", "threads", "--status", "interrupted", "--limit", "1") == ["t3"]
    assert ids("--db", db, "--json", "threads", "--status", "done", "--status", "failed") == []
    code, _, err = run(capsys, "--db", db, "threads", "--status", "asleep")
    assert code != EXIT["ok"]
    assert "unknown status 'asleep'" in err
    code, _, err = run(capsys, "--db", db, "threads", "--after", "nobody")
    assert code != EXIT["ok"]
    assert "names no thread" in err


def test_history_newest_first_with_steps_and_next(db: str, capsys: Any) -> None:
    code, out, _ = run(capsys, "--db", db, "--json", "history", "t1")
    assert code == EXIT["ok"]
    rows = json.loads(out)
    assert [r["step"] for r in rows] == [2, 1, 0, -1]
    assert [r["next"] for r in rows] == [["approve"], ["b"], ["a"], ["__start__"]]
    assert all(r["parent_id"] == older["checkpoint_id"] for r, older in itertools.pairwise(rows))


def test_show_prints_values_and_the_pending_interrupt(db: str, capsys: Any) -> None:
    code, out, _ = run(capsys, "show", "t1", "--db", db)
    assert code == EXIT["ok"]
    shown = json.loads(out)
    assert shown["values"] == {"log": ["a", "b"]}
    assert shown["next"] == ["approve"]
    assert [i["value"] for i in shown["interrupts"]] == ["ok?"]


def test_diff_against_the_parent_shows_appended_items(db: str, capsys: Any) -> None:
    code, out, _ = run(capsys, "diff", "t1", "--db", db, "--json")
    assert code == EXIT["ok"]
    changes = json.loads(out)["changes"]
    assert changes == [{"channel": "log", "kind": "appended", "old": ["a"], "new": ["b"]}]


def test_diff_between_named_checkpoints(db: str, capsys: Any) -> None:
    _, out, _ = run(capsys, "history", "t1", "--db", db, "--json")
    ids = [row["checkpoint_id"] for row in json.loads(out)]
    code, out, _ = run(capsys, "diff", "t1", ids[3], ids[0], "--db", db)
    assert code == EXIT["ok"]
    assert '+ log (added): ["a", "b"]' in out


def test_unknown_thread_and_checkpoint_exit_3(db: str, capsys: Any) -> None:
    for argv, hint in (
        (["show", "nope"], "statekeeper threads --db"),
        (["history", "nope"], "statekeeper threads --db"),
        (["show", "t1", "--checkpoint", "xxxx"], "statekeeper history t1 --db"),
    ):
        code, _, err = run(capsys, *argv, "--db", db)
        assert code == EXIT["not_found"], argv
        assert "nope" in err or "'xxxx'" in err
        assert f"`{hint} {db}`" in err  # the command that lists what is there, as typed


def test_bad_url_is_a_usage_error(capsys: Any) -> None:
    code, _, err = run(capsys, "threads", "--db", "mongodb://x")
    assert code == EXIT["usage"]
    assert "sqlite" in err  # the message lists the known schemes


def test_prune_keeps_the_newest_checkpoint(db: str, capsys: Any) -> None:
    code, _, _ = run(capsys, "prune", "t1", "--db", db, "--yes")
    assert code == EXIT["ok"]
    _, out, _ = run(capsys, "history", "t1", "--db", db, "--json")
    assert [row["step"] for row in json.loads(out)] == [2]
    _, out, _ = run(capsys, "history", "t2", "--db", db, "--json")
    assert len(json.loads(out)) == 4


def test_prune_delete_all(db: str, capsys: Any) -> None:
    code, _, _ = run(capsys, "prune", "--all", "--strategy", "delete", "--db", db, "-y")
    assert code == EXIT["ok"]
    _, out, _ = run(capsys, "threads", "--db", db)
    assert out.strip() == "no threads"


def test_prune_without_threads_is_a_usage_error(db: str, capsys: Any) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["prune", "--db", db])
    assert exc.value.code == EXIT["usage"]


def test_verify_reports_intact_storage(db: str, capsys: Any) -> None:
    code, out, _ = run(capsys, "verify", "--db", db, "--json")
    assert code == EXIT["ok"]
    assert json.loads(out) == {"threads": 2, "checkpoints": 8, "problems": []}


def test_verify_finds_and_quarantines_a_damaged_file(tmp_path: Path, capsys: Any) -> None:
    url = f"file://{tmp_path}/files"
    build_thread(url, "t1")
    (victim,) = (tmp_path / "files").rglob("checkpoints")  # the thread's checkpoint index
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01  # inside a committed line: its checksum no longer matches
    victim.write_bytes(bytes(data))
    code, out, _ = run(capsys, "verify", "--db", url, "--json")
    assert code == EXIT["failed"]
    assert json.loads(out)["problems"]
    code, out, _ = run(capsys, "verify", "--db", url, "--quarantine", "--json")
    assert code == EXIT["failed"]  # reported once more, now moved aside
    code, out, _ = run(capsys, "verify", "--db", url, "--json")
    assert code == EXIT["ok"], out


def test_quarantine_needs_file_storage(db: str, capsys: Any) -> None:
    code, _, err = run(capsys, "verify", "--quarantine", "--db", db)
    assert code == EXIT["usage"]
    assert "file://" in err


def test_every_command_has_help() -> None:
    from statekeeper.cli import build_parser

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert set(commands) == {
        "run", "resume", "threads", "history", "show", "diff", "fork", "copy",
        "export", "import", "prune", "verify", "migrate", "memory", "graph", "demo", "ui",
        "completion",
    }  # fmt: skip
    for name, sub in commands.items():
        assert sub.description, name
        assert "--db" in sub.format_help(), name


def test_python_dash_m_runs_the_cli(db: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "statekeeper", "threads", "--db", db, "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert [row["thread_id"] for row in json.loads(done.stdout)] == ["t2", "t1"]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_draws_on_a_terminal_only() -> None:
    from statekeeper._console import Progress

    terminal = _Terminal()
    bar = Progress("copy", terminal)
    bar.update(1, 4, "threads")
    bar.update(4, 4, "threads")
    drawn = terminal.getvalue()
    assert "copy:" in drawn
    assert "1/4" in drawn
    assert "4/4" in drawn
    assert "threads" in drawn
    bar.done()
    assert terminal.getvalue().endswith("\r")  # the bar is wiped, the summary comes next

    piped = io.StringIO()
    quiet = Progress("copy", piped)
    quiet.update(1, 4)
    quiet.done()
    assert piped.getvalue() == ""
    assert Progress("copy", _Terminal(), enabled=False).enabled is False  # -q


class _Color(enum.Enum):
    RED = "red"


class _Level(enum.StrEnum):
    HIGH = "high"


class _Pair(NamedTuple):
    left: int
    right: int


@dataclasses.dataclass
class _Box:
    size: int
    made: datetime.date


class _Message(BaseModel):  # shaped like a LangChain message, which is a pydantic model
    type: str
    content: Any
    id: str | None = None
    name: str | None = None
    tool_calls: list[Any] = []


class _Opaque:
    def __repr__(self) -> str:
        return "<opaque>"


class _Record:
    def _asdict(self) -> dict[str, Any]:
        return {"kept": True}


def test_jsonable_turns_stored_values_into_plain_json() -> None:
    from statekeeper._console import jsonable

    when = datetime.datetime(2026, 3, 2, 10, 0, tzinfo=datetime.UTC)
    assert jsonable({1: (None, True, 2.5, "x"), "set": frozenset({3})}) == {
        "1": [None, True, 2.5, "x"],
        "set": [3],
    }
    # first match decides: a message keeps only its type, content, id and tool calls, even
    # though it is a pydantic model; a named tuple is a tuple before it is a record
    assert jsonable(_Message(type="ai", content=[b"\x00"], id="m1")) == {
        "type": "ai",
        "content": [{"base64": "AA=="}],
        "id": "m1",
    }
    assert jsonable(_Pair(1, 2)) == [1, 2]
    assert jsonable(_Record()) == {"kept": True}
    assert jsonable(_Box(3, when.date())) == {"size": 3, "made": "2026-03-02"}
    assert jsonable(when) == "2026-03-02T10:00:00+00:00"
    assert jsonable(_Color.RED) == "red"
    assert jsonable(_Level.HIGH) is _Level.HIGH  # a str already: JSON writes its value
    assert jsonable(PurePosixPath("/tmp/x")) == "/tmp/x"
    assert jsonable(uuid.UUID(int=5)) == "00000000-0000-0000-0000-000000000005"  # no repr
    assert jsonable(decimal.Decimal("1.10")) == "1.10"  # exact: not a float
    assert jsonable(_Box) == repr(_Box)  # the class, not an instance
    assert jsonable(_Opaque()) == "<opaque>"

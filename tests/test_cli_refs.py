"""Checkpoints named as people type them, in the CLI: short ids in ``history``, prefixes,
``@STEP`` and ``~N`` in ``show``, ``diff``, ``fork`` and ``resume --from``; ``fork
--answer``, which forks at an interrupt and answers it in one command; interrupt values
printed as JSON. The thread is the example agent's (examples/approval_agent.py), waiting
at its ``interrupt()``, loaded from ``examples/approval_thread.jsonl`` so its ids are
known; the forks run the real graph."""

from __future__ import annotations

import json
import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from statekeeper.checkpointers import open_checkpointer
from statekeeper.cli import EXIT, main

ROOT = Path(__file__).resolve().parent.parent
DUMP = ROOT / "examples" / "approval_thread.jsonl"
# the dump's checkpoints of t1, newest first (step 3, waiting at "approve", down to -1)
IDS = [
    "1f1ef151-7850-687b-8003-6ac5767d456b",
    "1f1ef151-7833-63ec-8002-a4bcc0163c1a",
    "1f1ef151-7808-6f37-8001-3d37fca0cfab",
    "1f1ef151-77ef-646e-8000-8440272d277c",
    "1f1ef151-7773-6a53-bfff-eea2f227882d",
]
SHORT = [checkpoint_id[:12] for checkpoint_id in IDS]


@pytest.fixture(autouse=True)
def _importable_examples(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))


@pytest.fixture
def db(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    url = f"sqlite:///{tmp_path}/state.db"
    assert main(["--db", url, "import", str(DUMP)]) == EXIT["ok"]
    capsys.readouterr()
    return url


def sk(capsys: pytest.CaptureFixture[str], db: str, *argv: str) -> tuple[int, str, str]:
    code = main(["--db", db, *argv])
    out, err = capsys.readouterr()
    return code, out, err


def shown(capsys: Any, db: str, ref: str) -> str:
    """The checkpoint id ``show t1 REF --json`` prints."""
    code, out, err = sk(capsys, db, "show", "t1", ref, "--json")
    assert code == EXIT["ok"], err
    return str(json.loads(out)["checkpoint_id"])


def _count(db: str, thread: str = "t1") -> int:
    with open_checkpointer(db) as saver:
        return len(list(saver.list({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})))


def test_the_dump_holds_the_ids_these_tests_name(db: str, capsys: Any) -> None:
    code, out, _ = sk(capsys, db, "history", "t1", "--json")
    assert code == EXIT["ok"]
    assert [row["checkpoint_id"] for row in json.loads(out)] == IDS  # --json: full ids


def test_history_shows_short_ids_that_every_command_reads_back(db: str, capsys: Any) -> None:
    code, out, _ = sk(capsys, db, "history", "t1")
    assert code == EXIT["ok"]
    assert [line.split()[0] for line in out.splitlines()[1:]] == SHORT
    for short, full in zip(SHORT, IDS, strict=True):
        assert shown(capsys, db, short) == full
    _, out, _ = sk(capsys, db, "history", "t1", "--limit", "2")
    # unique in the whole thread, not only among the rows shown
    assert [line.split()[0] for line in out.splitlines()[1:]] == SHORT[:2]


def test_every_syntax_in_show(db: str, capsys: Any) -> None:
    for ref, expected in (
        (IDS[2], IDS[2]),
        ("1f1ef151-780", IDS[2]),
        ("1f1ef151-7808-6f", IDS[2]),
        ("@1", IDS[2]),
        ("@-1", IDS[4]),
        ("head", IDS[0]),
        ("latest", IDS[0]),
        ("~1", IDS[1]),
        ("~", IDS[1]),
        ("head~2", IDS[2]),
        ("@3~3", IDS[3]),
        ("1f1ef151-785~1~1", IDS[2]),
    ):
        assert shown(capsys, db, ref) == expected, ref
    code, out, _ = sk(capsys, db, "show", "t1", "--checkpoint", "@0", "--json")
    assert (code, json.loads(out)["checkpoint_id"]) == (EXIT["ok"], IDS[3])
    code, _, err = sk(capsys, db, "show", "t1", "@0", "--checkpoint", "@1")
    assert code == EXIT["usage"]
    assert "not both" in err


def test_diff_takes_references(db: str, capsys: Any) -> None:
    code, out, err = sk(capsys, db, "diff", "t1", "1f1ef151-780", "@2")
    assert code == EXIT["ok"], err
    assert out.splitlines()[0] == f"{IDS[2]} -> {IDS[1]}"
    assert '"type": "tool"' in out
    code, out, _ = sk(capsys, db, "diff", "t1", "~2", "--json")
    assert (code, json.loads(out)["from"], json.loads(out)["to"]) == (EXIT["ok"], IDS[2], IDS[0])


@pytest.mark.parametrize(
    "argv",
    [["show", "t1", ""], ["diff", "t1", ""], ["diff", "t1", "", ""], ["diff", "t1", "@1", ""]],
)
def test_an_empty_reference_is_refused_by_every_command(
    db: str, capsys: Any, argv: list[str]
) -> None:
    """``diff t1 ''`` read the empty FROM as no FROM, and diffed the newest checkpoint."""
    code, out, err = sk(capsys, db, *argv)
    assert (code, out) == (EXIT["usage"], ""), err
    assert "must be non-empty" in err


@pytest.mark.parametrize(
    ("ref", "says", "not_said"),
    [
        ("@9999999999999999999999", "the step is out of range", "a step is @ and a whole number"),
        ("@-" + "9" * 30, "the step is out of range", "a step is @ and a whole number"),
        ("~99999999999999999999", "the count after ~ is too large", "only ~N may follow"),
        ("@1~1~" + "9" * 10, "the count after ~ is too large", "only ~N may follow"),
    ],
)
def test_a_step_or_count_too_large_is_said_so(
    db: str, capsys: Any, ref: str, says: str, not_said: str
) -> None:
    for argv in (["show", "t1", ref], ["diff", "t1", ref], ["fork", "t1", ref]):
        code, out, err = sk(capsys, db, *argv)
        assert (code, out) == (EXIT["usage"], ""), argv
        assert says in err
        assert not_said not in err
        assert err.count("\n") == 1
    assert _count(db) == len(IDS)


def test_an_ambiguous_reference_is_one_line_listing_candidates(db: str, capsys: Any) -> None:
    code, out, err = sk(capsys, db, "show", "t1", "1f1ef151-7")
    assert (code, out) == (EXIT["usage"], "")
    assert err.count("\n") == 1
    assert "ambiguous" in err
    for short in SHORT:
        assert short in err
    assert "(step 3)" in err
    assert "(step -1)" in err
    code, _, err = sk(capsys, db, "--json", "diff", "t1", "1f1e")
    error = json.loads(err)["error"]
    assert (code, error["code"], error["type"]) == (2, "usage", "AmbiguousReferenceError")
    assert error["candidates"] == IDS


def test_a_reference_to_nothing_exits_3_with_the_reason(db: str, capsys: Any) -> None:
    for ref, reason in (
        ("@7", "no checkpoint at step 7; the thread has steps -1 to 3"),
        ("~5", "has no parent"),
        ("ffff0000", "no checkpoint id starts with it"),
    ):
        code, _, err = sk(capsys, db, "show", "t1", ref)
        assert code == EXIT["not_found"], ref
        assert f"no checkpoint {ref!r} in thread 't1'" in err
        assert reason in err
        assert f"`statekeeper history t1 --db {db}` lists its checkpoints" in err
    code, _, err = sk(capsys, db, "show", "nope", "@1")
    assert code == EXIT["not_found"]
    assert "no thread 'nope'" in err


@pytest.mark.parametrize(
    ("ref", "says"),
    [
        ("x" * 100_000, "at most 256 characters"),
        ("1f1e\x1b[2J\u202e", "control characters"),
        ("abc", "too short"),
        ("@twelve", "a step is @"),
        ("head~x", "only ~N"),
    ],
)
def test_a_hostile_reference_is_refused_in_one_escaped_line(
    db: str, capsys: Any, ref: str, says: str
) -> None:
    for argv in (["show", "t1", ref], ["diff", "t1", ref], ["fork", "t1", ref]):
        code, out, err = sk(capsys, db, *argv)
        assert (code, out) == (EXIT["usage"], ""), argv
        assert says in err
        assert err.count("\n") == 1
        assert len(err) < 400
        assert "\x1b" not in err
        assert "\u202e" not in err
    assert _count(db) == len(IDS)


def test_fork_answer_continues_the_graph_with_another_answer(db: str, capsys: Any) -> None:
    code, out, err = sk(capsys, db, "--json", "fork", "t1", "@3", "--answer", "no", "--to", "t2")
    assert code == EXIT["ok"], err
    result = json.loads(out)
    assert (result["thread_id"], result["status"]) == ("t2", "done")
    assert result["values"]["approved"] is False
    assert result["values"]["messages"][-1]["content"] == "(reply discarded)"
    assert _count(db) == len(IDS)  # the source thread is untouched
    # in the thread itself, the answer read from a file
    answer = Path(db.removeprefix("sqlite:///")).parent / "answer.json"
    answer.write_text('"yes"\n', encoding="utf-8")
    code, out, err = sk(capsys, db, "fork", "t1", SHORT[0], "--answer", f"@{answer}")
    assert code == EXIT["ok"], err
    assert "status      done" in out
    code, out, _ = sk(capsys, db, "show", "t1", "--json")
    assert json.loads(out)["values"]["messages"][-1]["content"] == "(reply sent)"


def test_resume_from_a_reference_with_an_answer(db: str, capsys: Any) -> None:
    code, out, err = sk(capsys, db, "--json", "resume", "t1", "--from", "@3", "--answer", "true")
    assert code == EXIT["ok"], err
    assert json.loads(out)["values"]["approved"] is True
    # without an answer, the fork runs until the interrupt() asks again
    code, out, err = sk(capsys, db, "--json", "resume", "t1", "--from", IDS[0])
    assert code == EXIT["interrupted"], err
    assert json.loads(out)["interrupts"][0]["value"]["question"] == "Send this reply?"


def test_resume_answers_a_fork_made_before(db: str, capsys: Any) -> None:
    """``fork`` then ``resume --answer``: the two commands ``fork --answer`` saves."""
    assert sk(capsys, db, "fork", "t1", "@3")[0] == EXIT["ok"]
    code, out, err = sk(capsys, db, "--json", "resume", "t1", "--answer", "no")
    assert code == EXIT["ok"], err
    assert json.loads(out)["values"]["approved"] is False


def test_fork_answer_where_nothing_was_asked_is_refused(db: str, capsys: Any) -> None:
    for argv in (
        ["fork", "t1", "@2", "--answer", "yes"],
        ["fork", "t1", "@2", "--answer", "yes", "--to", "t3"],
        ["resume", "t1", "--from", "~1", "--answer", "yes"],
    ):
        code, out, err = sk(capsys, db, *argv)
        assert (code, out) == (EXIT["refused"], ""), argv
        assert err.count("\n") == 1
        assert f"checkpoint {IDS[1]!r} (step 2) of thread 't1' asked no interrupt()" in err
    assert _count(db) == len(IDS)
    assert _count(db, "t3") == 0  # nothing was written, not even a copy


def test_fork_answer_refuses_a_bad_answer_file_before_anything(db: str, capsys: Any) -> None:
    code, _, err = sk(capsys, db, "fork", "t1", "@3", "--answer", "@/no/such/answer.json")
    assert code == EXIT["usage"]
    assert "'/no/such/answer.json' does not exist" in err
    assert _count(db) == len(IDS)


def test_interrupt_values_print_as_json(db: str, capsys: Any) -> None:
    code, _, err = sk(capsys, db, "resume", "t1")
    assert code == EXIT["interrupted"]
    assert '({"question": "Send this reply?", "reply": "Here is what I found: ' in err
    assert "{'question'" not in err
    code, out, _ = sk(capsys, db, "show", "t1")
    assert json.loads(out)["interrupts"][0]["value"]["question"] == "Send this reply?"
    code, out, _ = sk(capsys, db, "threads", "--json")
    (thread,) = json.loads(out)
    assert thread["interrupts"][0]["value"]["question"] == "Send this reply?"
    code, out, _ = sk(capsys, db, "fork", "t1", "@2", "--to", "t4")
    code, out, _ = sk(capsys, db, "resume", "t4")
    assert code == EXIT["interrupted"]
    assert 'waiting on  {"question": "Send this reply?"' in out


# -- graphs of this module, run by reference ("tests.test_cli_refs:...") ------------------


class Asked(TypedDict, total=False):
    answers: Annotated[list[str], operator.add]


def _asks(name: str) -> Any:
    return lambda state: {"answers": [f"{name}={interrupt(name)}"]}


def _graph(*, parallel: bool) -> Any:
    builder = StateGraph(Asked)
    builder.add_node("first", _asks("first"))
    builder.add_node("second", _asks("second"))
    builder.add_edge(START, "first")
    builder.add_edge(START if parallel else "first", "second")
    builder.add_edge("second", END)
    return builder.compile()


one_after_another = _graph(parallel=False)
side_by_side = _graph(parallel=True)


def _run(capsys: Any, db: str, graph: str, thread: str) -> None:
    code, _, err = sk(capsys, db, "run", f"tests.test_cli_refs:{graph}", "--thread", thread)
    assert code == EXIT["interrupted"], err


def test_fork_answer_stops_at_the_next_interrupt_with_exit_10(db: str, capsys: Any) -> None:
    _run(capsys, db, "one_after_another", "seq")
    assert sk(capsys, db, "resume", "seq", "--answer", "a1")[0] == EXIT["interrupted"]
    code, out, err = sk(capsys, db, "--json", "fork", "seq", "@0", "--answer", "a2", "--to", "seq2")
    assert code == EXIT["interrupted"], err
    result = json.loads(out)
    assert result["values"]["answers"] == ["first=a2"]
    assert [i["value"] for i in result["interrupts"]] == ["second"]


def test_fork_answer_refuses_a_step_where_several_tasks_asked(db: str, capsys: Any) -> None:
    _run(capsys, db, "side_by_side", "par")
    before = _count(db, "par")
    code, out, err = sk(capsys, db, "fork", "par", "head", "--answer", "x")
    assert (code, out) == (EXIT["usage"], "")
    assert "2 tasks asked an interrupt()" in err
    assert _count(db, "par") == before

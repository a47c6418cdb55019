"""``statekeeper memory ...``: search, show, stats, export and eval from the command line."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest

from statekeeper.cli import EXIT, main
from statekeeper.memory.node import notes_namespace
from statekeeper.memory.notes import Note, Provenance
from statekeeper.memory.store import open_store

DATA = Path(__file__).resolve().parent / "memory" / "data"
SAID = datetime.datetime(2026, 3, 2, 10, 0, tzinfo=datetime.UTC)


def note(text: str, *message_ids: str, thread: str = "ana") -> Note:
    return Note(
        text=text,
        provenance=Provenance(
            thread_id=thread,
            message_ids=message_ids,
            said_from=SAID,
            said_to=SAID,
            created_at=SAID,
            summarizer="extractive/2",
        ),
    )


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/state.db"
    with open_store(url) as store:
        for made in (
            note("Ana: I adopted a cat named Miso last spring.", "m1"),
            note("Ana: I work as a nurse at the Riverside clinic.", "m2"),
            note("Ana: My sister Lena lives in Porto.", "m3"),
        ):
            store.put(notes_namespace("ana"), made.key, made.to_value())
    return url


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_search_returns_relevant_notes_with_provenance(db: str, capsys: Any) -> None:
    code, out, err = cli(
        capsys,
        "memory",
        "search",
        "what is the cat called?",
        "--thread",
        "ana",
        "--db",
        db,
        "--json",
    )
    assert code == EXIT["ok"], err
    hits = json.loads(out)
    assert [hit["text"] for hit in hits] == ["Ana: I adopted a cat named Miso last spring."]
    assert hits[0]["provenance"]["thread_id"] == "ana"
    assert hits[0]["provenance"]["message_ids"] == ["m1"]
    assert 0.3 <= hits[0]["score"] <= 1.0

    code, out, _ = cli(
        capsys, "memory", "search", "what is the cat called?", "--thread", "ana", "--db", db
    )
    assert code == EXIT["ok"]
    assert "thread ana, messages m1, said 2026-03-02" in out


def test_search_says_when_nothing_is_relevant(db: str, capsys: Any) -> None:
    code, out, _ = cli(
        capsys, "memory", "search", "quantum chromodynamics", "--thread", "ana", "--db", db
    )
    assert code == EXIT["ok"]
    assert "no note is relevant enough" in out


def test_search_bad_durations_and_times_are_usage_errors(db: str, capsys: Any) -> None:
    code, _, err = cli(capsys, "memory", "search", "cat", "--db", db, "--max-age", "soon")
    assert code == EXIT["usage"]
    assert "30m, 12h, 7d" in err
    code, _, err = cli(capsys, "memory", "search", "cat", "--db", db, "--as-of", "yesterday")
    assert code == EXIT["usage"]
    assert "ISO 8601" in err


def test_show_prints_one_note_and_its_chain(db: str, capsys: Any) -> None:
    key = note("Ana: I adopted a cat named Miso last spring.", "m1").key
    code, out, err = cli(capsys, "memory", "show", key, "--thread", "ana", "--db", db)
    assert code == EXIT["ok"], err
    shown = json.loads(out)
    assert shown["text"].endswith("named Miso last spring.")
    assert shown["provenance"]["message_ids"] == ["m1"]
    assert shown["supersede_chain"] == [key]
    code, _, err = cli(capsys, "memory", "show", "nope", "--thread", "ana", "--db", db)
    assert code == EXIT["not_found"]
    assert err.startswith("statekeeper memory show: no note 'nope' in namespace 'notes/ana' in ")
    assert err.count("\n") == 1


def test_show_finds_a_note_without_its_thread_when_the_key_is_unique(db: str, capsys: Any) -> None:
    key = note("Ana: I adopted a cat named Miso last spring.", "m1").key
    code, out, err = cli(capsys, "memory", "show", key, "--db", db)
    assert code == EXIT["ok"], err
    assert json.loads(out)["namespace"] == ["notes", "ana"]

    code, out, err = cli(capsys, "memory", "show", "nope", "--db", db)
    assert (code, out) == (EXIT["not_found"], "")
    assert err.startswith("statekeeper memory show: no note 'nope' in sqlite:///")
    assert "`statekeeper memory export` lists the notes" in err
    assert err.count("\n") == 1
    code, _, err = cli(capsys, "memory", "show", "nope", "--db", db, "--json")
    assert json.loads(err)["error"]["code"] == "not_found"

    # the same key in two namespaces: which one is meant is for the user to say
    made = note("Ana: I adopted a cat named Miso last spring.", "m1")
    with open_store(db) as store:
        store.put(("archive", "2025"), key, made.to_value())
    code, out, err = cli(capsys, "memory", "show", key, "--db", db)
    assert (code, out) == (EXIT["usage"], "")
    assert "is in 2 namespaces: 'archive/2025', 'notes/ana'" in err
    assert err.count("\n") == 1
    code, out, _ = cli(capsys, "memory", "show", key, "--namespace", "archive/2025", "--db", db)
    assert code == EXIT["ok"]
    assert json.loads(out)["namespace"] == ["archive", "2025"]


def _recall_in_a_graph(url: str, thread: str, *questions: str) -> None:
    """Run a graph whose RetrievalNode recalls the thread's notes, once per question."""
    from langchain_core.messages import HumanMessage
    from langgraph.graph import START, MessagesState, StateGraph

    from statekeeper.memory import RetrievalNode

    class State(MessagesState):
        memories: list[dict[str, Any]]

    builder = StateGraph(State)
    builder.add_node("recall", RetrievalNode())
    builder.add_edge(START, "recall")
    with open_store(url) as store:
        graph = builder.compile(store=store)
        for question in questions:
            graph.invoke(
                {"messages": [HumanMessage(question)]}, {"configurable": {"thread_id": thread}}
            )


def test_stats_count_the_recalls_graphs_make_not_searches(db: str, capsys: Any) -> None:
    _recall_in_a_graph(db, "ana", "cat name", "cat name", "where does Ana work")
    for query in ("cat name", "cello", "where does Ana work"):  # looking is not recalling
        assert cli(capsys, "memory", "search", query, "--thread", "ana", "--db", db)[0] == 0
    code, out, err = cli(capsys, "memory", "stats", "--db", db, "--json")
    assert code == EXIT["ok"], err
    stats = json.loads(out)
    assert stats["overall"]["recalls"] == 3
    assert [row["group"] for row in stats["threads"]] == ["ana"]
    assert stats["overall"]["overlap"] == 1.0  # "cat name" came back the same the second time
    code, out, _ = cli(capsys, "memory", "stats", "--db", db)
    assert out.splitlines()[0].split()[:2] == ["GROUP", "RECALLS"]


def test_searches_alone_leave_the_stats_empty(db: str, capsys: Any) -> None:
    for query in ("cat name", "cat name"):
        assert cli(capsys, "memory", "search", query, "--thread", "ana", "--db", db)[0] == 0
    code, out, err = cli(capsys, "memory", "stats", "--db", db, "--json")
    assert code == EXIT["ok"], err
    assert json.loads(out)["overall"]["recalls"] == 0


def test_export_writes_every_item_as_json_lines(db: str, tmp_path: Path, capsys: Any) -> None:
    target = tmp_path / "notes.jsonl"
    code, _, err = cli(capsys, "memory", "export", "--thread", "ana", "--db", db, "-o", str(target))
    assert code == EXIT["ok"], err
    records = [json.loads(line) for line in target.read_text().splitlines()]
    assert len(records) == 3
    assert {tuple(r["namespace"]) for r in records} == {notes_namespace("ana")}
    assert "exported 3 items" in err


def test_eval_on_the_tiny_dataset(capsys: Any) -> None:
    code, out, err = cli(capsys, "memory", "eval", str(DATA / "tiny.json"), "--json")
    assert code == EXIT["ok"], err
    report = json.loads(out)
    assert set(report["metrics"]) == {"pipeline", "baseline"}
    assert report["settings"]["windows"] is True
    assert report["settings"]["hops"] == {"seeds": 2, "max_notes": 2, "max_tokens": 120}
    argv = ("memory", "eval", str(DATA / "tiny.json"), "--no-hops", "--no-windows", "--json")
    code, out, err = cli(capsys, *argv)
    assert code == EXIT["ok"], err
    settings = json.loads(out)["settings"]
    assert settings["windows"] is False
    assert "hops" not in settings


def test_eval_answers_on_the_tiny_dataset(tmp_path: Path, capsys: Any) -> None:
    chart = tmp_path / "answers.svg"
    code, out, err = cli(
        capsys,
        "memory",
        "eval",
        str(DATA / "tiny.json"),
        "--answers",
        "--reader-budget",
        "none",
        "--chart",
        str(chart),
        "--json",
    )
    assert code == EXIT["ok"], err
    report = json.loads(out)
    assert report["reader"] == "span"
    assert report["settings"]["reader_budget"] is None
    assert report["metrics"]["full-history"]["all"]["containment"] == 1.0
    assert report["sweep"]  # on by default
    assert chart.read_text(encoding="utf-8").startswith("<svg")
    code, out, err = cli(
        capsys, "memory", "eval", str(DATA / "tiny.json"), "--answers", "--no-sweep"
    )
    assert code == EXIT["ok"], err
    assert "CONTAIN" in out
    assert "freshness sweep" not in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--chart", "{tmp}/x.svg"], "--chart goes with --answers"),
        (["--answers", "--reader-budget", "0"], "--reader-budget takes a number"),
        (["--answers", "--reader", "gpt"], "provider:model"),
    ],
)
def test_eval_answers_refuses_bad_options(
    argv: list[str], message: str, tmp_path: Path, capsys: Any
) -> None:
    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in argv]
    code, _out, err = cli(capsys, "memory", "eval", str(DATA / "tiny.json"), *argv)
    assert code == EXIT["usage"]
    assert message in err
    assert "Traceback" not in err
    assert not (tmp_path / "x.svg").exists()


def test_a_store_can_be_named_apart_from_the_checkpoints(tmp_path: Path, capsys: Any) -> None:
    store_url = f"file://{tmp_path}/notes"
    with open_store(store_url) as store:
        made = note("Ana: I play the cello on Sundays.", "m9")
        store.put(notes_namespace("ana"), made.key, made.to_value())
    code, out, err = cli(
        capsys, "memory", "search", "cello", "--thread", "ana", "--store", store_url, "--json"
    )
    assert code == EXIT["ok"], err
    assert [hit["provenance"]["message_ids"] for hit in json.loads(out)] == [["m9"]]


@pytest.mark.parametrize("namespace", ["a.b", "../..", "notes/x\x00y"])
@pytest.mark.parametrize("command", [["search", "cat"], ["show", "k"], ["export"]])
def test_a_namespace_the_store_refuses_is_a_usage_error(
    db: str, capsys: Any, namespace: str, command: list[str]
) -> None:
    code, _, err = cli(capsys, "memory", *command, "--namespace", namespace, "--db", db)
    assert code == EXIT["usage"], err
    assert "a label cannot contain '.' or NUL" in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_eval_of_a_too_deeply_nested_file_is_one_line(tmp_path: Path, capsys: Any) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    code, _, err = cli(capsys, "memory", "eval", str(deep))
    assert code != EXIT["ok"]
    assert "nests arrays or objects too deeply" in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1

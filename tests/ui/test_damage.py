"""Damaged storage and empty storage: pages that explain, never crash pages.

A checkpoint whose stored bytes are damaged (as ``tests/backends/test_file.py`` and
``test_sqlite.py`` damage them) is shown as an error page with what is damaged, with a
5xx status; the thread's other checkpoints and the other threads still show. Empty
storage shows empty pages on every backend."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper.checkpointers import open_checkpointer
from statekeeper.graphs import Runner
from statekeeper.ui import UIOptions, create_app
from tests.ui.conftest import QUESTION, REF, TOKEN, Dataset, client_for, flip_byte, make_app


def _root_ids(saver: Any, thread_id: str) -> list[str]:
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    return sorted(t.checkpoint["id"] for t in saver.list(config))


@pytest.fixture
def damaged_file(tmp_path: Path) -> Iterator[tuple[Any, dict[str, str]]]:
    """file:// storage where the newest checkpoint of thread "bad" has a flipped byte."""
    root = tmp_path / "files"
    with open_checkpointer(f"file://{root}") as saver:
        runner = Runner(saver)
        runner.run(REF, QUESTION, thread_id="good")
        runner.run(REF, QUESTION, thread_id="bad")
        ids = _root_ids(saver, "bad")
        flip_byte(root / "threads" / "bad" / "~" / "checkpoints")
        yield saver, {"damaged": ids[-1]}


@pytest.fixture
def damaged_sqlite(tmp_path: Path) -> Iterator[tuple[Any, dict[str, str]]]:
    """SQLite storage where the parent of thread "bad"'s newest checkpoint is garbage."""
    path = tmp_path / "state.db"
    with open_checkpointer(f"sqlite:///{path}") as saver:
        runner = Runner(saver)
        runner.run(REF, QUESTION, thread_id="good")
        runner.run(REF, QUESTION, thread_id="bad")
        ids = _root_ids(saver, "bad")
        with sqlite3.connect(path) as conn:
            conn.execute(
                "UPDATE checkpoints SET checkpoint = X'c1c1c1c1' "
                "WHERE thread_id = 'bad' AND checkpoint_ns = '' AND checkpoint_id = ?",
                (ids[-2],),
            )
        conn.close()
        yield saver, {"damaged": ids[-2], "intact": ids[-1]}


def _client(saver: Any) -> Any:
    return client_for(create_app(UIOptions(saver=saver, token=TOKEN, port=8765)))


def test_a_damaged_checkpoint_file_shows_what_verify_reports(
    damaged_file: tuple[Any, dict[str, str]],
) -> None:
    saver, _ = damaged_file
    client = _client(saver)
    page = client.get("/checkpoint", params={"thread": "bad"})
    assert page.status_code == 500
    assert "CorruptCheckpointError" in page.text
    assert 'id="damage"' in page.text
    assert "checksum mismatch" in page.text
    assert "threads/bad/~/checkpoints" in page.text  # the damaged file
    api = client.get("/api/checkpoint", params={"thread": "bad"}).json()
    assert api["error"] == "CorruptCheckpointError"
    assert api["damage"]["backend"] == "file"
    assert api["damage"]["thread_id"] == "bad"
    assert api["damage"]["path"].endswith("threads/bad/~/checkpoints")
    # listing the thread reads the damaged line: the same panel, not a crash
    tree = client.get("/thread", params={"thread": "bad"})
    assert tree.status_code == 500
    assert 'id="damage"' in tree.text
    # the other thread still reads
    for path in ("/thread", "/checkpoint"):
        assert client.get(path, params={"thread": "good"}).status_code == 200


def test_a_damaged_sqlite_checkpoint_is_named_and_its_child_still_shows(
    damaged_sqlite: tuple[Any, dict[str, str]],
) -> None:
    saver, ids = damaged_sqlite
    client = _client(saver)
    page = client.get("/checkpoint", params={"thread": "bad", "id": ids["damaged"]})
    assert page.status_code == 500
    # SQLite reports a damaged payload as a SerializationError until it checksums
    # checkpoints; then as CorruptCheckpointError, with the damage record
    api = client.get("/api/checkpoint", params={"thread": "bad", "id": ids["damaged"]}).json()
    assert api["error"] in ("SerializationError", "CorruptCheckpointError")
    assert "corrupt" in api["message"]
    assert ('id="damage"' in page.text) == (api["damage"] is not None)
    # the newest checkpoint reads; its diff says why it has no parent to compare with
    head = client.get("/api/checkpoint", params={"thread": "bad"}).json()
    assert head["checkpoint_id"] == ids["intact"]
    assert head["diff"]["against"] is None
    assert head["diff"]["error"].startswith(f"cannot compare with the parent: {api['error']}")
    shown = client.get("/checkpoint", params={"thread": "bad"})
    assert shown.status_code == 200
    assert "cannot compare with the parent" in shown.text
    # the thread's history shows every other checkpoint, and names the damaged one
    tree = client.get("/api/thread", params={"thread": "bad"}).json()
    listed = {n["checkpoint_id"] for ns in tree["namespaces"] for b in ns["branches"] for n in b}
    assert ids["intact"] in listed
    assert ids["damaged"] not in listed
    assert [d["checkpoint_id"] for d in tree["damaged"]] == [ids["damaged"]]
    page = client.get("/thread", params={"thread": "bad"})
    assert page.status_code == 200
    assert 'id="damage"' in page.text
    assert "Damaged checkpoints" in page.text
    # a step reference reads past the damage
    assert client.get("/checkpoint", params={"thread": "bad", "id": "@-1"}).status_code == 200
    # its graph draws too, with nothing lit as having run (the parent says what ran)
    graph = client.get("/api/graph", params={"thread": "bad", "id": ids["intact"]})
    assert graph.status_code == 200, graph.text
    assert graph.json()["current"] == []


@pytest.mark.parametrize("damaged", ["damaged_file", "damaged_sqlite"])
def test_the_lists_skip_a_damaged_checkpoint_that_is_no_head(
    damaged: str, request: pytest.FixtureRequest
) -> None:
    # the thread list reads each thread's head (the thread index; the file backend, each
    # root log's head), not its older checkpoints, so an older damaged one does not stop
    # the lists: each thread shows, and one whose newest checkpoint cannot be read (the
    # file backend checks the whole log against its head) says why in its own row
    saver, _ = request.getfixturevalue(damaged)
    client = _client(saver)
    listed = client.get("/api/threads")
    assert listed.status_code == 200
    rows = {row["thread_id"]: row for row in listed.json()["threads"]}
    assert sorted(rows) == ["bad", "good"]
    assert rows["good"].get("error") is None
    assert (rows["bad"].get("error") is None) == (damaged == "damaged_sqlite")
    assert client.get("/api/interrupts").status_code == 200
    assert client.get("/threads").status_code == 200


def test_empty_storage_shows_empty_pages(fresh: Dataset) -> None:
    client = client_for(make_app(fresh))
    expected = {
        "/threads": "No threads in this storage yet.",
        "/interrupts": "No thread is waiting at an interrupt().",
        "/memory": "No notes in this store yet.",
        "/graph": "No graph to draw",
    }
    for path, text in expected.items():
        response = client.get(path)
        assert response.status_code == 200, path
        assert text in response.text
    assert client.get("/api/threads").json() == {
        "threads": [],
        "cursor": None,
        "q": "",
        "meta": "",
        "status": "",
    }
    assert client.get("/api/memory").json()["stats"]["overall"]["recalls"] == 0
    assert client.get("/thread", params={"thread": "x"}).status_code == 404


def test_without_a_store_the_memory_page_says_how_to_give_one(fresh: Dataset) -> None:
    client = client_for(create_app(UIOptions(saver=fresh.saver, token=TOKEN, port=8765)))
    response = client.get("/memory")
    assert response.status_code == 400
    assert "--store URL" in response.text

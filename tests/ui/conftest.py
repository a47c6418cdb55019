"""Stored data for the inspector's tests, on every backend of the shared ``BACKENDS`` list.

:func:`populate` writes, through the runner as users do:

* ``done``: answered and finished;
* ``waiting``: stopped at the ``interrupt()``;
* ``forked``: finished, forked (same thread) back at the interrupt and finished again
  with another answer, so its history has two branches;
* :data:`HOSTILE_ID`: a thread whose id, metadata and first message are markup, quotes
  and a right-to-left override, waiting at the interrupt.

Every thread also has subgraph checkpoints (``research:<task>``). The memory store gets
notes with provenance (one superseded by another), a hostile note, an item that is not
a note, and recall and compaction events in two time windows.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from statekeeper.checkpointers import open_checkpointer
from statekeeper.graphs import Runner, load_graph
from statekeeper.memory.conflicts import write_note
from statekeeper.memory.metrics import CompactionEvent, RecallEvent, log_compaction, log_recall
from statekeeper.memory.notes import Note, Provenance
from statekeeper.memory.store import open_store
from statekeeper.ui import UIOptions, create_app
from tests.conftest import BACKENDS, Backend

REF = "tests.ui.graphs:chat"
TOKEN = "test-token-0123456789"
BASE = "http://127.0.0.1:8765"
HOSTILE_ID = '<script>alert("id")</script>\'"\u202etxt.exe'
HOSTILE_TEXT = '<script>alert("msg")</script><img src=x onerror=alert(2)> "q" \'q\' \u202eevil'
HOSTILE_META = {"note": "<script>alert('meta')</script>", "<b>k</b>": "\u202ertl"}
QUESTION = {"messages": [{"role": "user", "content": "Where is order 1042?"}]}
NOTES_NS = ("notes", "done")
T0 = datetime.datetime(2025, 3, 1, 9, 0, tzinfo=datetime.UTC)


@dataclass
class Dataset:
    """What :func:`populate` stored, and where."""

    url: str
    saver: Any
    store: Any
    fork_source: str = ""  # the checkpoint of "forked" that was forked
    done_head: str = ""
    note_keys: dict[str, str] = field(default_factory=dict)


def _checkpoint_before_ask(saver: Any, thread_id: str) -> str:
    """The root checkpoint at which ``ask`` (the interrupt) is next, the oldest one."""
    from statekeeper.threads import pending_nodes

    found = [
        t.checkpoint["id"]
        for t in saver.list({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
        if pending_nodes(t.checkpoint) == ("ask",)
    ]
    return min(found)


def populate_threads(saver: Any) -> dict[str, str]:
    runner = Runner(saver)
    runner.run(REF, QUESTION, thread_id="done")
    runner.resume("done", answer="yes")
    runner.run(REF, QUESTION, thread_id="waiting")
    runner.run(REF, QUESTION, thread_id="forked")
    runner.resume("forked", answer="yes")
    source = _checkpoint_before_ask(saver, "forked")
    runner.fork("forked", source)
    runner.resume("forked")  # asks again
    runner.resume("forked", answer="no")
    hostile = {"messages": [{"role": "user", "content": HOSTILE_TEXT}]}
    config = {
        "configurable": {"thread_id": HOSTILE_ID},
        "metadata": {**HOSTILE_META, "statekeeper_graph": REF},
    }
    load_graph(REF, saver).invoke(hostile, config, durability="sync")
    done = saver.get_tuple({"configurable": {"thread_id": "done", "checkpoint_ns": ""}})
    return {"fork_source": source, "done_head": done.checkpoint["id"]}


def _note(text: str, when: datetime.datetime, checkpoint_id: str, **fact: Any) -> Note:
    provenance = Provenance(
        thread_id="done",
        message_ids=("ai-1", "tool-1"),
        checkpoint_id=checkpoint_id,
        said_from=when,
        said_to=when,
        created_at=when,
        summarizer="test/1",
    )
    return Note(text=text, provenance=provenance, **fact)


def populate_store(store: Any, checkpoint_id: str) -> dict[str, str]:
    old = write_note(
        store,
        NOTES_NS,
        _note("Ana lives in Lisbon", T0, checkpoint_id, subject="Ana", attribute="home"),
    )
    new = write_note(
        store,
        NOTES_NS,
        _note(
            "Ana lives in Porto",
            T0 + datetime.timedelta(days=2),
            checkpoint_id,
            subject="Ana",
            attribute="home",
        ),
    )
    hostile = write_note(store, NOTES_NS, _note(HOSTILE_TEXT, T0, checkpoint_id))
    store.put(("misc",), "plain", {"hello": "<i>world</i>"})
    for day, returned in ((0, 2), (0, 0), (1, 3)):
        log_recall(
            store,
            RecallEvent(
                at=T0 + datetime.timedelta(days=day, hours=1),
                namespace=NOTES_NS,
                query="where does ana live",
                thread_id="done",
                returned=returned,
                dropped=1,
                stale=1,
                top_score=0.8 if returned else None,
                keys=(new.key,) if returned else (),
                overlap=None,
            ),
        )
    log_compaction(store, CompactionEvent(T0, "done", 900, 300, 80, 520))
    return {"old": old.key, "new": new.key, "hostile": hostile.key}


def client_for(app: Any, *, token: str = TOKEN, base: str = BASE) -> TestClient:
    """A test client signed in with ``token``, as a browser that opened the URL is."""
    client = TestClient(app, base_url=base, follow_redirects=False)
    signed = client.get(f"/?token={token}")
    assert signed.status_code == 303, signed.text
    return client


def make_app(data: Dataset, *, write: bool = False, graph_ref: str | None = None) -> Any:
    options = UIOptions(
        saver=data.saver,
        token=TOKEN,
        store=data.store,
        graph_ref=graph_ref,
        write=write,
        port=8765,
        label=data.url,
    )
    return create_app(options)


def store_url(backend: Backend, url: str, tmp: Path) -> str:
    """Where the backend keeps notes: beside the checkpoints (the same SQLite file, the
    same Redis prefix), except the file backend, whose store is a folder of its own."""
    return f"file://{tmp}/store" if backend.name == "file" else url


@pytest.fixture(scope="module", params=BACKENDS, ids=str)
def dataset(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Dataset]:
    """The stored threads and notes of this module's tests, built once per backend."""
    backend: Backend = request.param
    tmp = tmp_path_factory.mktemp(backend.name)
    url = backend.url_for(tmp)
    with open_checkpointer(url) as saver, open_store(store_url(backend, url, tmp)) as store:
        data = Dataset(url, saver, store)
        found = populate_threads(saver)
        data.fork_source, data.done_head = found["fork_source"], found["done_head"]
        data.note_keys = populate_store(store, data.done_head)
        yield data
    if backend.cleanup is not None:
        backend.cleanup(url)


@pytest.fixture
def fresh(backend: Backend, url: str, tmp_path: Path) -> Iterator[Dataset]:
    """Empty storage on one backend, for a test that writes."""
    with open_checkpointer(url) as saver, open_store(store_url(backend, url, tmp_path)) as store:
        yield Dataset(url, saver, store)


def flip_byte(path: Path, at: int = -30) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


# -- the browser tests' Chromium (Debian's; never one Playwright downloads) ---------------

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: the browser tests must run)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def playwright() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (pip install -e '.[dev]')")
    if not CHROMIUM.exists():
        _unavailable(f"no {CHROMIUM}: apt-get install chromium chromium-driver")
    with sync_playwright() as driver:
        yield driver

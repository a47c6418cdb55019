"""``threads.page_threads`` and ``threads.interrupts``: the thread list a page at a time,
searched by id and metadata, and the interrupts a checkpoint waits on."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from statekeeper.checkpointers import open_checkpointer
from statekeeper.errors import ConfigurationError
from statekeeper.threads import ThreadPage, interrupts, list_threads, page_threads


def _put(saver: Any, thread_id: str, **metadata: Any) -> None:
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    saver.put(config, empty_checkpoint(), {"source": "input", "step": -1, **metadata}, {})


@pytest.fixture
def filled(saver: Any) -> Any:
    for index in range(7):
        _put(saver, f"thread-{index}", team="a" if index % 2 else "b")
    _put(saver, "Other", team="a")
    return saver


def test_pages_follow_the_cursor_through_every_thread_once(filled: Any) -> None:
    seen: list[str] = []
    page = page_threads(filled, limit=3)
    pages = 1
    while page.cursor is not None:
        seen += page.thread_ids
        page = page_threads(filled, limit=3, cursor=page.cursor)
        pages += 1
    seen += page.thread_ids
    assert seen == list_threads(filled)
    assert pages == 3
    assert len(seen) == 8


def test_a_last_full_page_has_no_cursor(filled: Any) -> None:
    assert page_threads(filled, limit=8).cursor is None
    assert page_threads(filled, limit=100) == ThreadPage(tuple(list_threads(filled)), None)


def test_search_by_id_ignores_case_and_by_metadata_uses_equality(filled: Any) -> None:
    assert page_threads(filled, match="OTHER").thread_ids == ("Other",)
    team_a = page_threads(filled, metadata={"team": "a"}).thread_ids
    assert team_a == ("Other", "thread-5", "thread-3", "thread-1")
    both = page_threads(filled, match="thread", metadata={"team": "a"}, limit=2)
    assert both.thread_ids == ("thread-5", "thread-3")
    assert page_threads(
        filled, match="thread", metadata={"team": "a"}, cursor=both.cursor
    ).thread_ids == ("thread-1",)
    assert page_threads(filled, metadata={"team": "nobody"}) == ThreadPage((), None)


def test_bad_limits_and_stale_cursors_are_refused(filled: Any) -> None:
    with pytest.raises(ConfigurationError, match="limit must be at least 1, got 0"):
        page_threads(filled, limit=0)
    with pytest.raises(ConfigurationError, match="cursor 'gone' is not one a page"):
        page_threads(filled, cursor="gone")
    with pytest.raises(ConfigurationError, match="is not one a page"):
        page_threads(filled, cursor="WyJhIl0")  # base64 JSON, but not a place
    with pytest.raises(ConfigurationError, match="unknown status 'asleep'"):
        page_threads(filled, status="asleep")
    with pytest.raises(ConfigurationError, match="after='nobody' names no thread"):
        list_threads(filled, after="nobody")


def test_a_cursor_survives_the_deletion_of_the_thread_it_stands_at(filled: Any) -> None:
    first = page_threads(filled, limit=3)
    filled.delete_thread(first.thread_ids[-1])
    rest = page_threads(filled, limit=100, cursor=first.cursor)
    assert first.thread_ids[:2] + rest.thread_ids == tuple(list_threads(filled))


def test_list_threads_pages_and_filters_by_status(filled: Any) -> None:
    everything = list_threads(filled)
    assert list_threads(filled, limit=3) == everything[:3]
    assert list_threads(filled, after=everything[2], limit=2) == everything[3:5]
    assert list_threads(filled, status="done") == everything  # nothing left to run
    assert list_threads(filled, status=["pending", "failed"]) == []
    assert list_threads(filled, match="THREAD-1") == ["thread-1"]
    assert list_threads(filled, metadata={"team": "b"}, limit=2) == ["thread-6", "thread-4"]


def test_interrupts_reads_the_pending_interrupt_writes() -> None:
    from langgraph.types import Interrupt

    with open_checkpointer("memory://") as saver:
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        stored = saver.put(config, empty_checkpoint(), {"source": "loop", "step": 1}, {})
        assert interrupts(saver.get_tuple(stored)) == []
        asked = Interrupt(value={"question": "ok?"}, id="i-1")
        saver.put_writes(stored, [("__interrupt__", [asked])], "task-1")  # a paused task
        [found] = interrupts(saver.get_tuple(stored))
        assert (found.id, found.value) == ("i-1", {"question": "ok?"})
        # a task that wrote output after its interrupt has finished: nothing waits there
        done = Interrupt(value={"question": "done?"}, id="i-2")
        saver.put_writes(stored, [("__interrupt__", [done]), ("answer", 1)], "task-2")
        assert [i.id for i in interrupts(saver.get_tuple(stored))] == ["i-1"]

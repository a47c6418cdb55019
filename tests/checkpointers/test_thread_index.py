"""The thread index (``Checkpointer.thread_heads``) on every backend: each thread's newest
root checkpoint, newest first, paged by keyset, kept right by every write and by
maintenance, and rebuilt by ``verify(repair=True)``."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

from statekeeper.checkpointers import open_checkpointer
from statekeeper.checkpointers.heads import Head, scan_heads
from statekeeper.errors import ConfigurationError
from statekeeper.threads import list_threads, page_threads


def _put(saver: Any, thread_id: str, ns: str = "", **metadata: Any) -> str:
    checkpoint = empty_checkpoint()
    checkpoint["id"] = str(uuid6())
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
    saver.put(config, checkpoint, {"source": "loop", "step": 1, **metadata}, {})
    return checkpoint["id"]


def _all(saver: Any, size: int = 3) -> list[Head]:
    """Every head, a page of ``size`` at a time."""
    found: list[Head] = []
    while page := saver.thread_heads(limit=size, after=found[-1] if found else None):
        found += page
    return found


def test_heads_are_the_newest_root_checkpoints_newest_first(saver: Any) -> None:
    ids = {f"t{i}": _put(saver, f"t{i}") for i in range(5)}
    ids["t1"] = _put(saver, "t1")  # written again: first now
    _put(saver, "t3", ns="sub")  # a subgraph checkpoint moves nothing
    _put(saver, "only-sub", ns="sub")  # a thread with no root checkpoint has no head
    expected = sorted((Head(t, c) for t, c in ids.items()), key=lambda h: h.rank, reverse=True)
    assert [h.thread_id for h in expected][:2] == ["t1", "t4"]
    assert saver.thread_heads(limit=100) == expected
    assert _all(saver, 2) == expected
    assert scan_heads(saver) == expected  # the index says what a full scan says
    assert list_threads(saver) == [h.thread_id for h in expected]


def test_keyset_pages_have_no_duplicates_or_gaps_while_threads_are_written(saver: Any) -> None:
    for i in range(9):
        _put(saver, f"old-{i}")
    before = [h.thread_id for h in saver.thread_heads(limit=100)]
    seen: list[str] = []
    page = page_threads(saver, limit=2)
    n = 0
    while True:
        seen += page.thread_ids
        _put(saver, f"new-{n}")  # new threads go to the top, behind the cursor
        _put(saver, before[-1 - n])  # and so does an old one written again
        n += 1
        if page.cursor is None:
            break
        page = page_threads(saver, limit=2, cursor=page.cursor)
    assert len(seen) == len(set(seen))
    rewritten = set(before[len(before) - n :])
    # every thread not written meanwhile is listed once; a rewritten one at most once
    assert [t for t in before if t not in rewritten] == [t for t in seen if t not in rewritten]


def test_ties_are_broken_by_thread_id_and_paged_exactly(saver: Any) -> None:
    _put(saver, "source")
    for target in ("b", "a", "c"):
        saver.copy_thread("source", target)  # the same newest id, four times
    heads = saver.thread_heads(limit=10)
    assert [h.thread_id for h in heads] == ["source", "c", "b", "a"]
    assert len({h.checkpoint_id for h in heads}) == 1
    assert _all(saver, 1) == heads


def test_maintenance_keeps_the_index_right(saver: Any) -> None:
    keep = _put(saver, "keep", run_id="run-1")
    _put(saver, "gone")
    first = _put(saver, "runs", run_id="run-1")
    _put(saver, "runs", run_id="run-2")
    _put(saver, "pruned")
    newest_pruned = _put(saver, "pruned")
    saver.delete_thread("gone")
    saver.delete_for_runs(["run-2"])  # "runs" falls back to its older checkpoint
    saver.prune(["pruned"])  # keeps the newest
    saver.copy_thread("keep", "copy")
    assert {h.thread_id: h.checkpoint_id for h in saver.thread_heads(limit=10)} == {
        "keep": keep,
        "copy": keep,
        "runs": first,
        "pruned": newest_pruned,
    }
    saver.delete_for_runs(["run-1"])  # "keep", "copy" (copied metadata) and "runs" empty
    assert [h.thread_id for h in saver.thread_heads(limit=10)] == ["pruned"]
    saver.prune(["pruned"], strategy="delete")
    assert saver.thread_heads(limit=10) == []
    assert scan_heads(saver) == []


@pytest.mark.parametrize(
    "thread_id",
    ["ünïcødé-☃", "emoji-🧵", "sp ace", "{tag}:x*?[]", "%41", "nul\x00inside", "\n\t", "a" * 300],
)
def test_hostile_thread_ids_are_indexed_as_they_are(saver: Any, thread_id: str) -> None:
    _put(saver, "plain")
    checkpoint_id = _put(saver, thread_id)
    assert saver.thread_heads(limit=1) == [Head(thread_id, checkpoint_id)]
    assert saver.thread_heads(limit=5, after=(thread_id, checkpoint_id))[0].thread_id == "plain"
    saver.delete_thread(thread_id)
    assert [h.thread_id for h in saver.thread_heads(limit=5)] == ["plain"]


def test_bad_arguments_are_refused(saver: Any) -> None:
    for limit in (0, -1, 1.5, "3", True):
        with pytest.raises(ConfigurationError, match="limit must be a positive integer"):
            saver.thread_heads(limit=limit)
    for after in ("t", ("t",), ("t", 1), ["t", "c"]):
        with pytest.raises(ConfigurationError, match="after must be a"):
            saver.thread_heads(limit=1, after=after)


def test_a_read_only_open_lists_through_the_index(url: str, backend: Any) -> None:
    if not backend.persistent:
        pytest.skip("memory:// is gone once closed")
    with open_checkpointer(url) as saver:
        ids = [_put(saver, f"t{i}") for i in range(3)]
    with open_checkpointer(url, mode="ro") as reader:
        assert [h.checkpoint_id for h in reader.thread_heads(limit=10)] == ids[::-1]

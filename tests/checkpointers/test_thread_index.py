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


# -- the index damaged, and storage written before it --------------------------------------


def _damage_index(saver: Any, backend: Any, url: str, thread_id: str, how: str) -> None:
    """Delete (``how="delete"``) or falsify (``"damage"``) the index record of a thread."""
    if backend.name == "file":
        from pathlib import Path
        from shutil import rmtree

        from statekeeper.backends.file._log.catalog_files import (
            JournalWriter,
            journal_path,
            read_state,
        )

        index = Path(saver.path) / "index"
        if how == "delete":
            rmtree(index)  # the whole index
            return
        state = read_state(index)  # a well-formed line that names an older head
        writer = JournalWriter(journal_path(index, state.journal))
        try:
            writer.append([{"h": "0", "t": thread_id}], durable=False)
        finally:
            writer.close()
        return
    if backend.name in ("memory", "sqlite"):
        with saver._db.transaction(write=True) as conn:
            if how == "delete":
                conn.execute("DELETE FROM heads WHERE thread_id = ?", (thread_id,))
            else:
                conn.execute("UPDATE heads SET newest_id = '0' WHERE thread_id = ?", (thread_id,))
        return
    if backend.name == "postgres":
        from urllib.parse import parse_qs, urlsplit

        from tests.postgres_servers import connect

        schema = parse_qs(urlsplit(url).query)["schema"][0]
        with connect(url) as conn:
            heads = f'"{schema}".heads'
            if how == "delete":
                conn.execute(f"DELETE FROM {heads} WHERE thread_id = %s", (thread_id,))
            else:
                conn.execute(
                    f"UPDATE {heads} SET newest_id = '0' WHERE thread_id = %s", (thread_id,)
                )
        return
    from tests.redis_servers import REDIS, client_for

    prefix = saver.prefix
    client = client_for(REDIS.prefixes[prefix])
    registry = f"{prefix}:{{{prefix}:threads}}"
    if how == "delete":
        client.delete(f"{registry}:heads")  # the whole sorted set
    else:  # a member that names an older checkpoint
        client.zadd(f"{registry}:heads", {b"0\x00\x01" + thread_id.encode() + b"\x00\x01": 0})


@pytest.mark.parametrize("how", ["delete", "damage"])
def test_verify_reports_a_damaged_index_and_repair_rebuilds_it(
    saver: Any, backend: Any, url: str, how: str
) -> None:
    ids = {t: _put(saver, t) for t in ("a", "b", "c")}
    expected = saver.thread_heads(limit=10)
    _damage_index(saver, backend, url, "b", how)
    found = saver.verify()
    assert found
    assert {d.record for d in found} <= {"index", "head"}
    repaired = saver.verify(repair=True)
    assert [d.path for d in repaired] == [d.path for d in found]
    assert all(d.reason.endswith("]") for d in repaired)  # says what was rebuilt
    assert saver.verify() == []
    assert saver.thread_heads(limit=10) == expected
    assert {h.thread_id: h.checkpoint_id for h in expected} == ids


def test_an_older_sqlite_database_gains_the_index_on_opening(tmp_path: Any) -> None:
    import sqlite3

    path = tmp_path / "old.db"
    with open_checkpointer(f"sqlite:///{path}") as saver:
        ids = [_put(saver, f"t{i}") for i in range(3)]
    conn = sqlite3.connect(path)
    with conn:  # what schema 4 was: no thread index
        conn.execute("DROP INDEX heads_threads")
        conn.execute("DELETE FROM statekeeper_migrations WHERE version = 5")
    with open_checkpointer(f"sqlite:///{path}?mode=ro") as reader:  # not migrated: no index
        assert [h.checkpoint_id for h in reader.thread_heads(limit=10)] == ids[::-1]
    assert (
        conn.execute("SELECT name FROM sqlite_master WHERE name = 'heads_threads'").fetchall() == []
    )
    conn.close()
    with open_checkpointer(f"sqlite:///{path}") as saver:  # read-write: migrated
        assert [h.checkpoint_id for h in saver.thread_heads(limit=10)] == ids[::-1]
    conn = sqlite3.connect(path)
    plan = conn.execute(
        "EXPLAIN QUERY PLAN SELECT thread_id, newest_id FROM heads WHERE checkpoint_ns = ''"
        " ORDER BY newest_id DESC, thread_id DESC LIMIT 5"
    ).fetchall()
    assert "heads_threads" in str(plan)
    conn.close()


def test_a_database_older_than_the_heads_is_scanned_read_only(tmp_path: Any) -> None:
    import sqlite3

    path = tmp_path / "older.db"
    with open_checkpointer(f"sqlite:///{path}") as saver:
        ids = [_put(saver, f"t{i}") for i in range(3)]
    conn = sqlite3.connect(path)
    with conn:  # schema 3: no heads table at all
        conn.execute("DROP TABLE heads")
        conn.execute("DELETE FROM statekeeper_migrations WHERE version >= 4")
    conn.close()
    with open_checkpointer(f"sqlite:///{path}?mode=ro") as reader:
        assert [h.checkpoint_id for h in reader.thread_heads(limit=10)] == ids[::-1]
        assert list_threads(reader, limit=2) == ["t2", "t1"]


def test_older_redis_keys_gain_the_index_on_a_read_write_open(backend: Any, url: str) -> None:
    if not backend.name.startswith("redis"):
        pytest.skip("Redis keys only")
    from tests.redis_servers import REDIS, client_for

    with open_checkpointer(url) as saver:
        ids = [_put(saver, f"t{i}") for i in range(3)]
        prefix = saver.prefix
    client = client_for(REDIS.prefixes[prefix])
    registry = f"{prefix}:{{{prefix}:threads}}"
    # layout 2 had no thread index, nor the checkpoint index of layout 4
    gone = ("heads", "head", "checkpoints", "checkpoints:by-thread")
    client.delete(*(f"{registry}:{name}" for name in gone))
    client.set(f"{prefix}:layout", "2")
    with open_checkpointer(url, mode="ro") as reader:  # read as they are: a scan
        assert [h.checkpoint_id for h in reader.thread_heads(limit=10)] == ids[::-1]
        assert [t.checkpoint["id"] for t in reader.list(None)] == ids[::-1]
    assert not client.exists(f"{registry}:heads")
    with open_checkpointer(url) as saver:  # upgraded: the indexes are built first
        assert client.get(f"{prefix}:layout") == b"4"
        assert client.zcard(f"{registry}:heads") == 3
        assert client.zcard(f"{registry}:checkpoints") == 3
        assert [h.checkpoint_id for h in saver.thread_heads(limit=10)] == ids[::-1]
        assert [t.checkpoint["id"] for t in saver.list(None)] == ids[::-1]
        assert saver.verify() == []


def test_a_file_log_past_its_head_is_listed_by_its_last_line(tmp_path: Any) -> None:
    # a head lags its log after a power loss (its updates are not flushed): the listing
    # then reads the log's last line instead of trusting the head
    with open_checkpointer(f"file://{tmp_path}/files") as saver:
        _put(saver, "t")
        head = tmp_path / "files" / "threads" / "t" / "~" / "checkpoints.head"
        behind = head.read_bytes()
        newest = _put(saver, "t")
        head.write_bytes(behind)
        assert saver.thread_heads(limit=1) == [Head("t", newest)]


def test_a_cluster_put_killed_after_its_index_entry_is_no_damage(saver: Any, backend: Any) -> None:
    """In a Cluster the index is written just before the put's script (another slot): a
    put killed between the two leaves its thread indexed by a checkpoint it never stored
    — the same harmless leftover as its registry entry. verify finds no damage, a repair
    rebuilds the index, and the listing shows the thread by its real head."""
    if backend.name != "redis-cluster":
        pytest.skip("the index shares the put's script on every other backend")
    from statekeeper.backends.redis._client import ordered
    from tests.redis_servers import REDIS, client_for

    stored = _put(saver, "a")
    never_stored = str(uuid6())  # what the killed put was writing
    client = client_for(REDIS.prefixes[saver.prefix])
    registry = f"{saver.prefix}:{{{saver.prefix}:threads}}"
    field = ordered("a")
    member = ordered(never_stored) + field
    client.zrem(f"{registry}:heads", ordered(stored) + field)
    client.zadd(f"{registry}:heads", {member: 0})
    client.hset(f"{registry}:head", field, member)
    assert saver.verify() == []
    assert [head.thread_id for head in saver.thread_heads(limit=10)] == ["a"]
    assert saver.verify(repair=True) == []
    assert saver.thread_heads(limit=10) == [Head("a", stored)]  # rebuilt from the thread

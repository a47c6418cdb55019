"""The SQLite checkpointer's async writes: many coroutines' puts are stored by one writer
thread in one transaction, each caller resumes only once its rows are committed, and a
failing job, a failing commit, a cancelled caller or a close never stores part of a job
or loses one."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)

from statekeeper.backends.sqlite import _values
from statekeeper.backends.sqlite.checkpointer import SqliteCheckpointer
from statekeeper.errors import StorageError


async def _aput(saver: SqliteCheckpointer, thread: str, value: Any) -> dict:
    checkpoint = generate_checkpoint(channel_values={"messages": value})
    versions = {"messages": saver.get_next_version(None, None)}
    checkpoint["channel_versions"] = versions
    return await saver.aput(generate_config(thread), checkpoint, generate_metadata(), versions)


def _transactions(saver: SqliteCheckpointer, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record ``write`` of every transaction the checkpointer's database begins."""
    seen: list[bool] = []
    begin = saver._db.transaction

    @contextlib.contextmanager
    def counted(*, write: bool) -> Iterator[Any]:
        seen.append(write)
        with begin(write=write) as conn:
            yield conn

    monkeypatch.setattr(saver._db, "transaction", counted)
    return seen


def _stored_threads(path: Path) -> list[str]:
    with SqliteCheckpointer(str(path), mode="ro") as reader:
        return sorted({t.config["configurable"]["thread_id"] for t in reader.list(None)})


def test_puts_queued_together_are_committed_in_one_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "db.sqlite"

    async def main(saver: SqliteCheckpointer) -> None:
        # Hold the connection so the writer waits: what queues meanwhile is one batch.
        with saver._db._lock:
            tasks = [asyncio.create_task(_aput(saver, f"t{i}", [i])) for i in range(20)]
            await asyncio.sleep(0.2)
        await asyncio.gather(*tasks)
        for i in range(20):
            stored = await saver.aget_tuple(generate_config(f"t{i}"))
            assert stored is not None
            assert stored.checkpoint["channel_values"]["messages"] == [i]

    with SqliteCheckpointer(str(path)) as saver:
        writes = _transactions(saver, monkeypatch)
        asyncio.run(main(saver))
        assert 1 <= writes.count(True) <= 2  # the first job may have gone alone
    assert _stored_threads(path) == sorted(f"t{i}" for i in range(20))


def test_a_failing_job_raises_in_its_caller_only_and_stores_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "db.sqlite"
    real = _values.write_value

    def write_value(conn: Any, thread_id: str, *args: Any) -> Any:
        chosen = real(conn, thread_id, *args)  # its value row is written, then it fails
        if thread_id == "bad":
            raise StorageError("disk trouble")
        return chosen

    monkeypatch.setattr(_values, "write_value", write_value)

    async def main(saver: SqliteCheckpointer) -> list[Any]:
        with saver._db._lock:
            tasks = [
                asyncio.create_task(_aput(saver, thread, ["x"]))
                for thread in ("a", "bad", "b", "c")
            ]
            await asyncio.sleep(0.2)
        return await asyncio.gather(*tasks, return_exceptions=True)

    with SqliteCheckpointer(str(path)) as saver:
        results = asyncio.run(main(saver))
        assert [type(r).__name__ for r in results] == ["dict", "StorageError", "dict", "dict"]
        assert saver.get_tuple(generate_config("bad")) is None
        assert saver.verify() == []
    assert _stored_threads(path) == ["a", "b", "c"]
    with sqlite3.connect(path) as conn:  # no value row of the failed put was left behind
        blobs = conn.execute("SELECT thread_id FROM blobs ORDER BY thread_id").fetchall()
    assert blobs == [("a",), ("b",), ("c",)]


def test_a_failing_commit_fails_every_job_of_the_batch_and_stores_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "db.sqlite"

    async def main(saver: SqliteCheckpointer) -> list[Any]:
        begin = saver._db.transaction

        @contextlib.contextmanager
        def failing(*, write: bool) -> Iterator[Any]:
            with begin(write=write) as conn:
                yield conn
                if write:
                    raise StorageError("the commit failed")  # rolls the transaction back

        with saver._db._lock:
            tasks = [asyncio.create_task(_aput(saver, f"t{i}", [i])) for i in range(5)]
            monkeypatch.setattr(saver._db, "transaction", failing)
            await asyncio.sleep(0.2)
        return await asyncio.gather(*tasks, return_exceptions=True)

    with SqliteCheckpointer(str(path)) as saver:
        results = asyncio.run(main(saver))
        assert all(isinstance(r, StorageError) for r in results), results
        monkeypatch.undo()
        assert saver.verify() == []
    assert _stored_threads(path) == []


def test_close_stores_what_is_queued_and_later_calls_say_closed(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    saver = SqliteCheckpointer(str(path))
    done = threading.Event()

    async def queue_and_close() -> None:
        with saver._db._lock:
            tasks = [asyncio.create_task(_aput(saver, f"t{i}", [i])) for i in range(5)]
            await asyncio.sleep(0.1)
            closer = threading.Thread(target=lambda: (saver.close(), done.set()))
            closer.start()
            await asyncio.sleep(0.1)
            assert not done.is_set()  # close waits for the queued jobs
        await asyncio.gather(*tasks)
        closer.join()
        with pytest.raises(StorageError, match="closed"):
            await _aput(saver, "late", [0])

    asyncio.run(queue_and_close())
    assert _stored_threads(path) == [f"t{i}" for i in range(5)]


def test_a_cancelled_caller_leaves_its_job_to_finish(tmp_path: Path) -> None:
    async def main(saver: SqliteCheckpointer) -> None:
        with saver._db._lock:
            task = asyncio.create_task(_aput(saver, "t", ["kept"]))
            await asyncio.sleep(0.1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        await _aput(saver, "after", ["next"])  # the writer is alive and serves the next
        stored = await saver.aget_tuple(generate_config("t"))
        assert stored is not None
        assert stored.checkpoint["channel_values"]["messages"] == ["kept"]

    with SqliteCheckpointer(str(tmp_path / "db.sqlite")) as saver:
        asyncio.run(main(saver))


def test_event_loops_in_several_threads_share_one_writer(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"

    def conversation(saver: SqliteCheckpointer, n: int) -> None:
        async def turns() -> None:
            await asyncio.gather(*(_aput(saver, f"loop{n}-{i}", [n, i]) for i in range(10)))

        asyncio.run(turns())

    with SqliteCheckpointer(str(path)) as saver:
        threads = [threading.Thread(target=conversation, args=(saver, n)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert saver.verify() == []
    assert len(_stored_threads(path)) == 40

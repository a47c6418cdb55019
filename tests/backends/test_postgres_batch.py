"""The PostgreSQL checkpointer's batched async calls (``_running.serve``): a batch is one
round trip and one transaction, a failing statement fails only its own caller and stores
nothing of the batch before the calls run again alone, an operation of several
statements finishes after the batch, and a lost connection counts as one of ``retries``.
A continuation that loses its connection runs again from its start. Real server only
(``tests/postgres_servers.py``); ``serve`` is called directly with hand-made operations
on a table of the test's schema."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from statekeeper._storage.worker import Job
from statekeeper.backends.postgres._database import Database
from statekeeper.backends.postgres._running import BEGIN, COMMIT, Call, Op, Q, serve
from statekeeper.checkpointers import open_checkpointer
from statekeeper.errors import ReadOnlyError, StorageError
from tests.postgres_servers import POSTGRES


@pytest.fixture
def url() -> Iterator[str]:
    made = POSTGRES.url()
    yield made
    POSTGRES.cleanup(made)


def _database(url: str) -> Iterator[Database]:
    with open_checkpointer(url) as saver:
        db: Database = saver._db
        db.run(lambda: _create(), write=True)
        yield db


@pytest.fixture
def db(url: str) -> Iterator[Database]:
    yield from _database(url)


def _create() -> Op[None]:
    yield Q("CREATE TABLE IF NOT EXISTS t (n integer PRIMARY KEY)", fetch="count")


def _insert(n: int) -> Op[int]:
    yield Q("INSERT INTO t VALUES (%s) ON CONFLICT DO NOTHING", (n,), "count")
    return n


def _fail() -> Op[None]:
    yield Q("SELECT 1 / 0", fetch="one")


def _insert_then_read(n: int) -> Op[list[Any]]:
    yield Q("INSERT INTO t VALUES (%s) ON CONFLICT DO NOTHING", (n,), "count")
    rows = yield Q("SELECT n FROM t WHERE n = %s", (n,))
    return [row[0] for row in rows]


def _in_a_transaction(*ns: int) -> Op[int]:
    yield BEGIN
    for n in ns:
        yield Q("INSERT INTO t VALUES (%s) ON CONFLICT DO NOTHING", (n,), "count")
    yield COMMIT
    return len(ns)


def _count() -> Op[int]:
    row = yield Q("SELECT count(*) FROM t", fetch="one")
    return int(row[0])


def _kill_own_connection() -> Op[None]:
    yield Q("SELECT pg_terminate_backend(pg_backend_pid())", fetch="one")


def _serve(db: Database, *calls: Call) -> list[Job]:
    """Run ``calls`` as one batch; the jobs, each with its result or error."""
    loop = asyncio.new_event_loop()
    try:
        jobs = [Job(call, loop, loop.create_future()) for call in calls]
        serve(db, jobs)
    finally:
        loop.close()
    return jobs


def _rows(db: Database) -> list[tuple[int, int]]:
    """Each stored ``n`` with the id of the transaction that stored it (``xmin``)."""

    def read() -> Op[list[tuple[int, int]]]:
        rows = yield Q("SELECT n, xmin::text::bigint FROM t ORDER BY n")
        return [(row[0], row[1]) for row in rows]

    return db.run(read)


def _write(make: Callable[[], Op[Any]]) -> Call:
    return Call(make, write=True)


def test_a_batch_is_one_transaction_and_each_caller_gets_its_own_result(db: Database) -> None:
    jobs = _serve(db, *(_write(lambda n=n: _insert(n)) for n in range(20)))
    assert [(job.result, job.error) for job in jobs] == [(n, None) for n in range(20)]
    rows = _rows(db)
    assert [n for n, _ in rows] == list(range(20))
    assert len({xid for _, xid in rows}) == 1  # one commit for the batch


def test_a_failing_statement_fails_its_caller_only_and_the_others_run_again_alone(
    db: Database,
) -> None:
    jobs = _serve(db, _write(lambda: _insert(1)), _write(_fail), _write(lambda: _insert(3)))
    assert jobs[0].result == 1
    assert jobs[2].result == 3
    assert isinstance(jobs[1].error, StorageError)
    assert "division by zero" in str(jobs[1].error)
    rows = _rows(db)
    assert [n for n, _ in rows] == [1, 3]  # each once
    # stored by two transactions of their own: the batch's was rolled back whole
    assert len({xid for _, xid in rows}) == 2


def test_operations_of_several_statements_finish_after_the_batch(db: Database) -> None:
    jobs = _serve(
        db,
        _write(lambda: _insert(1)),
        _write(lambda: _insert_then_read(2)),
        _write(lambda: _in_a_transaction(3, 4)),
        _write(lambda: _insert(5)),
    )
    assert [(job.result, job.error) for job in jobs] == [
        (1, None),
        ([2], None),
        (2, None),
        (5, None),
    ]
    rows = dict(_rows(db))
    assert sorted(rows) == [1, 2, 3, 4, 5]
    assert rows[1] == rows[2] == rows[5]  # the first statements: the batch's transaction
    assert rows[3] == rows[4] != rows[1]  # BEGIN...COMMIT: a transaction of its own


def test_a_lost_connection_is_one_of_the_retries(url: str) -> None:
    # retries=1 (the default): the batch was the one attempt, each call runs again alone
    with open_checkpointer(url) as saver:
        db: Database = saver._db
        db.run(lambda: _create(), write=True)
        jobs = _serve(db, _write(lambda: _insert(1)), Call(_kill_own_connection))
        assert jobs[0].result == 1
        assert isinstance(jobs[1].error, StorageError)
        assert "lost the connection" in str(jobs[1].error)  # killed again alone: no retry left
        assert [n for n, _ in _rows(db)] == [1]
    # retries=0: every call of the batch fails, and nothing of the batch is stored
    with open_checkpointer(url + "&retries=0") as saver:
        db = saver._db
        jobs = _serve(db, _write(lambda: _insert(2)), Call(_kill_own_connection))
        assert all(isinstance(job.error, StorageError) for job in jobs)
        assert "the write was rolled back" in str(jobs[0].error)
        assert [n for n, _ in _rows(db)] == [1]


def test_a_read_only_database_refuses_the_writes_of_a_batch_and_serves_its_reads(
    url: str,
) -> None:
    list(_database(url))  # creates the table, then closes
    with open_checkpointer(url + "&mode=ro") as saver:
        db: Database = saver._db
        jobs = _serve(db, _write(lambda: _insert(1)), Call(_count))
    assert isinstance(jobs[0].error, ReadOnlyError)
    assert (jobs[1].result, jobs[1].error) == (0, None)


def test_without_pipeline_mode_each_call_runs_alone(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A libpq older than 14 has no pipeline mode: the calls still land, one by one."""
    monkeypatch.setattr(psycopg.Pipeline, "is_supported", classmethod(lambda cls: False))
    jobs = _serve(db, *(_write(lambda n=n: _insert(n)) for n in range(3)))
    assert [(job.result, job.error) for job in jobs] == [(0, None), (1, None), (2, None)]
    assert len({xid for _, xid in _rows(db)}) == 3


def test_a_continuation_whose_connection_is_lost_runs_again_from_its_start(
    db: Database,
) -> None:
    """An operation's first statement commits with the batch; its second kills its own
    connection once. The retry runs the operation again from its start."""
    attempts: list[int] = []

    def insert_then_kill_once() -> Op[str]:
        attempts.append(1)
        yield Q("INSERT INTO t VALUES (1) ON CONFLICT DO NOTHING", fetch="count")
        if len(attempts) == 1:
            yield Q("SELECT pg_terminate_backend(pg_backend_pid())", fetch="one")
        return "done"

    jobs = _serve(db, _write(insert_then_kill_once), _write(lambda: _insert(2)))
    assert [(job.result, job.error) for job in jobs] == [("done", None), (2, None)]
    assert len(attempts) == 2  # the batch's, then the retry from the start
    assert [n for n, _ in _rows(db)] == [1, 2]

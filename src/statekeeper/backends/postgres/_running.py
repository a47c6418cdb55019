"""How operations reach PostgreSQL: one at a time, or the async API's in batches.

Each operation is written once, as a generator that yields :class:`Q` requests and
receives their replies (:data:`Op`). :func:`drive` runs one on a connection (and
:func:`adrive` on an asyncio one); :class:`~._database.Database` picks the connection and
retries a lost one.

The async API's small calls (``aget_tuple``, ``aput``, ``aput_writes``) come from many
conversations at once. On an asyncio pool each takes a connection, sends its statement,
then waits for its own reply and its own commit. Instead they queue for one thread
(:class:`~statekeeper._storage.worker.BatchWorker`), and :func:`serve` sends the first
statement of every call waiting in pipeline mode on one pooled connection, then syncs
once: the server runs them in order in one implicit transaction, which commits once for
the batch, and every reply comes back in that one round trip.

Guarantees of a batch, as of :meth:`~._database.Database.run`:

* a caller resumes after the batch committed, with its own result or error;
* a statement that fails aborts the batch's transaction, so none of it is stored; then
  every call of the batch runs again alone (each operation is idempotent), so one
  caller's error is never another's; a lost connection counts as one of ``retries``;
* an operation that needs more statements after its first (a delta whose base changed,
  a delta chain to read) continues alone after the batch committed (a retry starts it
  over); one that opens a transaction of its own, or sends many parameter sets, runs
  alone after the batch.

Rows a batch writes stay locked until its commit, a round trip later. Two batches (of two
processes, say) that lock the same rows in opposite orders deadlock; the server ends
one batch after ``deadlock_timeout``, and its calls run again one by one.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import psycopg
import psycopg_pool
from psycopg import sql

from statekeeper._storage.worker import Job

if TYPE_CHECKING:
    from statekeeper.backends.postgres._database import Database

__all__ = ["BEGIN", "BEGIN_READ", "COMMIT", "Call", "Op", "Q", "adrive", "drive", "lost", "serve"]

T = TypeVar("T")
logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Q:
    """One statement and its parameters. The reply: the rows (``"all"``), the first row
    or ``None`` (``"one"``), or the number of rows changed (``"count"``)."""

    sql: str | sql.Composable
    params: Sequence[Any] | dict[str, Any] | None = None
    fetch: Literal["all", "one", "count"] = "all"
    many: bool = False  # params is a sequence of parameter sets (executemany)
    # prepared on its first run on a connection, not its sixth (psycopg's threshold): the
    # statements of every put and read, whose planning costs more than their execution
    prepare: bool = False


Op = Generator[Q, Any, T]
BEGIN = Q("BEGIN", fetch="count")
# A consistent snapshot for reads of several statements.
BEGIN_READ = Q("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", fetch="count")
COMMIT = Q("COMMIT", fetch="count")


# The SQLSTATEs of a server ending the session: shutting down (57P01, 57P02), starting
# (57P03), or ending an idle session (57P05); and class 08, connection exceptions.
_ENDED = frozenset({"57P01", "57P02", "57P03", "57P05"})


def lost(exc: psycopg.OperationalError) -> bool:
    """Whether ``exc`` says the connection broke (so a new one may succeed): libpq's own
    errors, which carry no SQLSTATE (a closed socket, a timeout), and the server's that end
    the session. Any other error the server sent came over a working connection (a lock
    timeout, a cancelled query, a row too large to index: SQLSTATE class 54...)."""
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in _ENDED


# -- one operation ----------------------------------------------------------------------


def _fetched(cur: psycopg.Cursor[Any], q: Q) -> Any:
    """What ``q`` asked for, from the cursor that ran it."""
    if q.fetch == "count":
        return cur.rowcount
    if cur.description is None:
        return [] if q.fetch == "all" else None
    return cur.fetchall() if q.fetch == "all" else cur.fetchone()


async def _afetched(cur: psycopg.AsyncCursor[Any], q: Q) -> Any:
    """:func:`_fetched` from an asyncio cursor."""
    if q.fetch == "count":
        return cur.rowcount
    if cur.description is None:
        return [] if q.fetch == "all" else None
    return await (cur.fetchall() if q.fetch == "all" else cur.fetchone())


def _left_open(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether a failed operation left a transaction open on ``conn`` (to roll back)."""
    return not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE


def drive(conn: psycopg.Connection[Any], op: Op[T]) -> T:
    """Run ``op`` on ``conn``; roll back a transaction it left open by failing."""
    reply: Any = None
    try:
        with conn.cursor() as cur:
            while True:
                try:
                    q = op.send(reply)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
                if q.many:
                    cur.executemany(q.sql, q.params or [])  # type: ignore[arg-type]
                    reply = cur.rowcount
                else:
                    cur.execute(q.sql, q.params, prepare=q.prepare or None)  # type: ignore[arg-type]
                    reply = _fetched(cur, q)
    except BaseException:
        op.close()
        if _left_open(conn):
            with contextlib.suppress(psycopg.Error):
                conn.execute("ROLLBACK")
        raise


async def adrive(conn: psycopg.AsyncConnection[Any], op: Op[T]) -> T:
    """:func:`drive` on an asyncio connection."""
    reply: Any = None
    try:
        async with conn.cursor() as cur:
            while True:
                try:
                    q = op.send(reply)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
                if q.many:
                    await cur.executemany(q.sql, q.params or [])  # type: ignore[arg-type]
                    reply = cur.rowcount
                else:
                    await cur.execute(q.sql, q.params, prepare=q.prepare or None)  # type: ignore[arg-type]
                    reply = await _afetched(cur, q)
    except BaseException:
        op.close()
        if _left_open(conn):
            with contextlib.suppress(psycopg.Error):
                await conn.execute("ROLLBACK")
        raise


# -- a batch of the async API's calls -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Call:
    """A queued call: the operation to run (made afresh for each attempt), and whether
    it writes."""

    make: Callable[[], Op[Any]]
    write: bool = False


def serve(db: Database, batch: list[Job]) -> None:
    """Run the :class:`Call`\\ s of ``batch`` (``BatchWorker``'s ``serve``), as the module
    docstring says: pipelined in one transaction, then alone what must be."""
    calls: list[Job] = []
    for job in batch:
        if job.task.write and db.read_only:
            job.error = db.read_only_error()
        else:
            calls.append(job)
    if not calls:
        return
    retries = None
    try:
        rest = _first_round(db, calls)
    except psycopg_pool.PoolTimeout as exc:
        _fail(db, calls, exc)
        return
    except psycopg.Error as exc:  # the batch's transaction failed: none of it is stored
        logger.info("a batch of calls to %s failed; running each alone: %s", db.display, exc)
        if isinstance(exc, psycopg.OperationalError) and lost(exc):
            retries = db.connection.retries - 1  # this attempt was one
            if retries < 0:
                _fail(db, calls, exc)
                return
        rest = [(job, job.task.make) for job in calls]
    for job, make in rest:
        job.result = job.error = None
        try:
            job.result = db.run(make, write=job.task.write, retries=retries)
        except Exception as exc:  # the caller's to raise
            job.error = exc


def _first_round(db: Database, calls: list[Job]) -> list[tuple[Job, Callable[[], Op[Any]]]]:
    """:func:`_pipelined` on a pooled connection; what is left to run alone."""
    if not psycopg.Pipeline.is_supported():  # a libpq older than 14: one call at a time
        return [(job, job.task.make) for job in calls]
    with db.pooled() as conn:
        return _pipelined(conn, calls)


def _fail(db: Database, jobs: list[Job], exc: Exception) -> None:
    for job in jobs:
        job.error = db.error(exc, job.task.write)


def _pipelined(
    conn: psycopg.Connection[Any], calls: list[Job]
) -> list[tuple[Job, Callable[[], Op[Any]]]]:
    """Send the first statement of each call and sync once; finish the calls the replies
    finish. Returns the calls to run alone, each with the operation to run."""
    rest: list[tuple[Job, Callable[[], Op[Any]]]] = []
    sent: list[tuple[Job, Op[Any], psycopg.Cursor[Any], Q]] = []
    with conn.pipeline() as pipeline:
        for job in calls:
            op = job.task.make()
            try:
                q = op.send(None)
            except StopIteration as stop:
                job.result = stop.value
                continue
            except Exception as exc:  # the caller's to raise
                job.error = exc
                continue
            if q.many or q.sql in (BEGIN.sql, BEGIN_READ.sql):
                op.close()
                rest.append((job, job.task.make))
                continue
            cur = conn.cursor()
            cur.execute(q.sql, q.params, prepare=q.prepare or None)
            sent.append((job, op, cur, q))
        pipeline.sync()  # one round trip: every statement run, the batch committed
    for job, op, cur, q in sent:
        with cur:
            reply = _fetched(cur, q)
        try:
            q = op.send(reply)
        except StopIteration as stop:
            job.result = stop.value
        except Exception as exc:
            job.error = exc
        else:  # more statements: alone, after the batch
            rest.append((job, _then_afresh(op, q, job.task.make)))
    return rest


def _then_afresh(op: Op[T], q: Q, make: Callable[[], Op[T]]) -> Callable[[], Op[T]]:
    """For :meth:`Database.run`: ``op`` from the statement ``q`` it has just yielded on
    the first attempt, ``make()`` from the start on a retry."""
    tried = False

    def resumed() -> Op[T]:
        nonlocal tried
        if tried:
            return make()
        tried = True
        return _resumed(op, q)

    return resumed


def _resumed(op: Op[T], q: Q) -> Op[T]:
    """``op``, which has just yielded ``q``, from there on."""
    while True:
        reply = yield q
        try:
            q = op.send(reply)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

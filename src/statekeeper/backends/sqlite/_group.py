"""Group commit for the async API: one writer thread stores what many coroutines wrote in
one transaction.

An async service calls ``aput`` / ``aput_writes`` from many conversations at once. Run
each in a worker thread of its own and the threads queue on the connection's lock, each
paying for a thread hop, a transaction and a commit. Here they queue as jobs instead: one
thread takes every job waiting, prepares them (serialising values outside the lock),
stores each under a savepoint of one write transaction, commits once and then answers
every caller.

Guarantees are those of one call per transaction: a caller's coroutine resumes only once
its rows are committed; a job that fails is rolled back to its savepoint and raises in its
own caller only (nothing of it is stored); if the commit fails, every job of the batch
raises and nothing of the batch is stored. A cancelled caller does not cancel its job (as
with ``asyncio.to_thread``): it is stored or fails on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from statekeeper.backends.sqlite._database import DRIVER_ERRORS, Database, wrap
from statekeeper.errors import StorageError

__all__ = ["GroupCommit", "Job"]

# One job: prepare() runs outside the transaction and returns store(conn), which runs in
# it (under a savepoint) and returns finish(), which runs once the batch is committed.
Finish = Callable[[], None]
Store = Callable[[Any], Finish]
Prepare = Callable[[], Store]

T = TypeVar("T")

MAX_BATCH = 64  # jobs per transaction: bounds how long one commit keeps others waiting
IDLE_SECONDS = 2.0  # the writer thread stops after this long without a job


@dataclass(slots=True)
class Job:
    """A write queued by a coroutine, and the future its caller awaits."""

    prepare: Prepare | None  # a write, or
    call: Callable[[], Any] | None  # a read, run on its own before the batch's writes
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    error: BaseException | None = None
    finish: Finish | None = field(default=None)
    result: Any = None


class GroupCommit:
    """The writer thread of one :class:`Database`: started when a job comes, gone after
    :data:`IDLE_SECONDS` without one (so an unclosed checkpointer leaves no thread
    behind), restarted in a forked child; :meth:`close` lets it finish what is queued."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._lock = threading.Lock()  # guards _thread, _jobs and _pid
        self._closed = False

    async def run(self, prepare: Prepare) -> None:
        """Queue ``prepare``'s job and wait until it is committed (or raise its error)."""
        await self._queue(prepare, None)

    async def call(self, read: Callable[[], T]) -> T:
        """Run ``read`` on the writer thread (before the writes queued with it)."""
        result: T = await self._queue(None, read)
        return result

    async def _queue(self, prepare: Prepare | None, call: Callable[[], Any] | None) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        job = Job(prepare, call, loop, future)
        with self._lock:
            if self._closed:
                raise StorageError(
                    f"the SQLite database {self._db.path!r} is closed; open a new "
                    "checkpointer or store"
                )
            if self._pid != os.getpid():  # a forked child: the parent's thread is not here
                self._pid, self._jobs, self._thread = os.getpid(), queue.SimpleQueue(), None
            # queued before the check, so a writer that is leaving sees it and stays
            self._jobs.put(job)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name="statekeeper-sqlite-writer", daemon=True
                )
                self._thread.start()
        return await future

    def close(self) -> None:
        """Let the writer store the jobs already queued, then stop it. Idempotent."""
        with self._lock:
            self._closed = True
            thread = self._thread if self._pid == os.getpid() else None
            if thread is not None:
                self._jobs.put(None)
        if thread is not None:
            thread.join()

    def _serve(self) -> None:
        jobs = self._jobs
        while True:
            try:
                job = jobs.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    if jobs.empty():
                        self._thread = None
                        return
                continue
            if job is None:
                return
            batch = [job]
            while len(batch) < MAX_BATCH:
                try:
                    more = jobs.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    jobs.put(None)  # stop after this batch
                    break
                batch.append(more)
            self._commit(batch)
            _answer(batch)

    def _commit(self, batch: list[Job]) -> None:
        stores: list[tuple[Job, Store]] = []
        for job in batch:
            try:
                if job.prepare is None:
                    assert job.call is not None
                    job.result = job.call()
                else:
                    stores.append((job, job.prepare()))
            except BaseException as exc:  # the caller's to raise, not the writer's
                job.error = exc
        if not stores:
            return
        try:
            with self._db.transaction(write=True) as conn:
                for job, store in stores:
                    conn.execute("SAVEPOINT job")
                    try:
                        job.finish = store(conn)
                    except BaseException as exc:
                        conn.execute("ROLLBACK TO job")
                        job.error = (
                            wrap(exc, self._db.path) if isinstance(exc, DRIVER_ERRORS) else exc
                        )
                    conn.execute("RELEASE job")
        except BaseException as exc:  # nothing of the batch was stored
            for job, _ in stores:
                job.error, job.finish = job.error or exc, None
            return
        for job, _ in stores:
            if job.finish is not None:
                try:
                    job.finish()
                except BaseException as exc:
                    job.error = exc


def _answer(batch: list[Job]) -> None:
    """Resolve every job's future on its own loop, one callback per loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Job]] = {}
    for job in batch:
        by_loop.setdefault(job.loop, []).append(job)
    for loop, jobs in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
            loop.call_soon_threadsafe(_resolve, jobs)


def _resolve(jobs: list[Job]) -> None:
    for job in jobs:
        if job.future.done():  # the caller was cancelled
            continue
        if job.error is None:
            job.future.set_result(job.result)
        else:
            job.future.set_exception(job.error)

"""Group commit for the async API: one thread stores what many coroutines wrote in one
transaction.

The async API's calls are jobs for one :class:`~statekeeper._storage.worker.BatchWorker`
per checkpointer. Of each batch it takes, the reads run first (each in its own read
transaction, as the sync API does), then the writes are prepared (serialised outside
the lock), stored each under a savepoint of one write transaction, and committed once.

Guarantees are those of one call per transaction: a caller resumes only once its rows
are committed; a write that fails is rolled back to its savepoint and raises in its own
caller only (nothing of it is stored); if the commit fails, every write of the batch
raises and nothing of the batch is stored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from statekeeper._storage.worker import BatchWorker, Job
from statekeeper.backends.sqlite._database import DRIVER_ERRORS, Database, wrap
from statekeeper.errors import StorageError

__all__ = ["GroupCommit"]

T = TypeVar("T")

# A write: prepare() runs outside the transaction and returns store(conn), which runs in
# it (under a savepoint) and returns finish(), which runs once the batch is committed.
Finish = Callable[[], None]
Store = Callable[[Any], Finish]
Prepare = Callable[[], Store]


@dataclass(frozen=True, slots=True)
class _Read:
    call: Callable[[], Any]


@dataclass(frozen=True, slots=True)
class _Write:
    prepare: Prepare


class GroupCommit:
    """The async API's way into one :class:`Database`."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self.worker = BatchWorker("statekeeper-sqlite-writer", self._serve, self._closed)

    async def write(self, prepare: Prepare) -> None:
        """Queue a write and wait until it is committed (or raise its error)."""
        await self.worker.submit(_Write(prepare))

    async def read(self, call: Callable[[], T]) -> T:
        """Run ``call`` (a read with its own transaction) on the writer thread."""
        result: T = await self.worker.submit(_Read(call))
        return result

    def close(self) -> None:
        """Store the writes already queued, then stop the thread. Idempotent."""
        self.worker.close()

    def _closed(self) -> StorageError:
        return StorageError(
            f"the SQLite database {self._db.path!r} is closed; open a new checkpointer or store"
        )

    def _serve(self, batch: list[Job]) -> None:
        stores: list[tuple[Job, Store]] = []
        for job in batch:
            try:
                if isinstance(job.task, _Read):
                    job.result = job.task.call()
                else:
                    stores.append((job, job.task.prepare()))
            except BaseException as exc:  # the caller's to raise, not the writer's
                job.error = exc
        if stores:
            self._commit(stores)

    def _commit(self, stores: list[tuple[Job, Store]]) -> None:
        finishes: list[tuple[Job, Finish]] = []
        try:
            with self._db.transaction(write=True) as conn:
                for job, store in stores:
                    conn.execute("SAVEPOINT job")
                    try:
                        finishes.append((job, store(conn)))
                    except BaseException as exc:
                        conn.execute("ROLLBACK TO job")
                        job.error = (
                            wrap(exc, self._db.path) if isinstance(exc, DRIVER_ERRORS) else exc
                        )
                    conn.execute("RELEASE job")
        except BaseException as exc:  # nothing of the batch was stored
            for job, _ in stores:
                job.error = job.error or exc
            return
        for job, finish in finishes:
            try:
                finish()
            except BaseException as exc:
                job.error = exc

"""How the SQLite checkpointer stores and reads channel values (the ``blobs`` table),
and stores a ``put`` and a ``put_writes``: one call per transaction (the sync API), or
many in one (the async API's group commit).

A value is stored whole, compressed, or as an append delta on an earlier version of the
same channel (see :mod:`statekeeper._storage.deltas`). Reading follows a delta's
chain down to a full copy, verifying each row's checksum and the rebuilt payload's CRC;
writing re-checks, inside the write transaction, that a delta's base still holds what the
writer remembers, and stores the full copy otherwise.

A write is prepared outside the transaction (:func:`plan_put` serialises the values and
plans append deltas), stored in it (``store(conn)``, which checksums every row and counts
the checkpoint in its head), and finished once committed (the payloads stored are
remembered as the bases of the next deltas, never before: a rolled-back value must not be
built on).

Group commit: the async API's calls are jobs for one
:class:`~statekeeper._storage.worker.BatchWorker` per checkpointer. Of each batch it
takes, the reads run first (each in its own read transaction, as the sync API does), then
the writes are prepared, stored each under a savepoint of one write transaction, and
committed once. Guarantees are those of one call per transaction: a caller resumes only
once its rows are committed; a write that fails is rolled back to its savepoint and
raises in its own caller only (nothing of it is stored); if the commit fails, every write
of the batch raises and nothing of the batch is stored.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper._storage.deltas import PlannedValue, StoredValue, ValuePlanner, rebuild_all
from statekeeper._storage.remembered import MAX_CHAIN, RecentPayloads
from statekeeper._storage.worker import BatchWorker, Job
from statekeeper.backends.sqlite._database import DRIVER_ERRORS, Database, wrap
from statekeeper.backends.sqlite._integrity import (
    Where,
    check_key,
    check_value,
    checkpoint_row,
    corrupt,
    key_path,
    value_crc,
    write_crc,
)
from statekeeper.backends.sqlite._queries import (
    ADD_TO_WRITES_DIGEST,
    COUNT_VALUES,
    INSERT_CHECKPOINT,
    INSERT_VALUE,
    INSERT_WRITE,
    REPLACE_VALUE,
    SELECT_CRC,
    SELECT_VALUE,
    SELECT_WRITE_CRC,
    UPDATE_CHECKPOINT,
    UPSERT_HEAD,
    VALUE_COLUMNS,
    Row,
)
from statekeeper.checkpointers.records import PreparedPut, PreparedWrites
from statekeeper.errors import SerializationError, StorageError

__all__ = ["GroupCommit", "Memo", "ValueReader", "plan_put", "store_writes", "write_value"]

Memo = dict[tuple[str, ...], bytes]


class ValueReader:
    """Reads full payloads of one namespace's values in one transaction.

    ``memo`` keeps every payload rebuilt (older checkpoints of a listing share them);
    ``recent`` is the checkpointer's memory of the payloads it wrote; ``legacy`` whether
    rows without a checksum are read unverified (see :mod:`._integrity`).
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        recent: RecentPayloads,
        memo: Memo | None = None,
        *,
        legacy: bool,
    ) -> None:
        self.conn = conn
        self.recent = recent
        self.memo: Memo = {} if memo is None else memo
        self.legacy = legacy

    def read(self, key: tuple[str, str], row: Row, where: Where) -> bytes:
        """The full payload of a ``blobs`` row (:data:`VALUE_COLUMNS`) of namespace
        ``key``, following its append-delta chain.

        Raises:
            CorruptCheckpointError: a row of the chain or the rebuilt payload is damaged
                (record ``"value"`` or ``"delta"``), or a base is missing.
        """
        thread_id, ns = key
        memo_key = (thread_id, ns, row[0], row[1])
        if memo_key in self.memo:  # this row was verified and rebuilt in this transaction
            return self.memo[memo_key]
        wanted = check_value(key, row, where, legacy=self.legacy)
        remembered = self.recent.get((thread_id, ns, wanted.channel))
        # The newest version this process wrote, if the row still holds what it wrote.
        if remembered is not None and (remembered.version, remembered.crc) == (
            wanted.version,
            wanted.crc,
        ):
            self.memo[memo_key] = remembered.data
            return remembered.data
        chain, below = self._chain(key, wanted, where)
        try:
            rebuilt = rebuild_all(chain, below)
        except SerializationError as exc:
            path = key_path("blobs", thread_id, ns, wanted.channel, wanted.version)
            record = "value" if len(chain) == 1 and below is None else "delta"
            raise corrupt(where, record, path, str(exc).split(";")[0]) from exc
        # Keep every payload rebuilt on the way: older checkpoints of a listing need them.
        for link, data in zip(chain, rebuilt, strict=True):
            self.memo[(thread_id, ns, link.channel, link.version)] = data
        return self.memo[memo_key]

    def check_empty(self, key: tuple[str, str], row: Row, where: Where) -> None:
        """Verify the row of a version without a value (the ``empty`` marker)."""
        memo_key = (*key, row[0], row[1])
        if memo_key not in self.memo:
            check_value(key, row, where, legacy=self.legacy)
            self.memo[memo_key] = b""

    def _chain(
        self, key: tuple[str, str], wanted: StoredValue, where: Where
    ) -> tuple[list[StoredValue], bytes | None]:
        """``wanted``'s delta chain, nearest base first, down to a full copy or to a
        version already rebuilt (returned as the payload below the chain)."""
        thread_id, ns = key
        chain = [wanted]
        while chain[-1].base is not None:
            below = self.memo.get((thread_id, ns, wanted.channel, chain[-1].base))
            if below is not None:
                return chain, below
            base = None
            if len(chain) <= MAX_CHAIN:
                base = self.conn.execute(
                    SELECT_VALUE, (thread_id, ns, wanted.channel, chain[-1].base)
                ).fetchone()
            if base is None:
                reason = (
                    "its chain of deltas is longer than any written"
                    if len(chain) > MAX_CHAIN
                    else f"the value at version {chain[-1].version} is a delta on this "
                    "version, which is missing"
                )
                path = key_path("blobs", thread_id, ns, wanted.channel, chain[-1].base)
                raise corrupt(where, "delta", path, reason)
            check_key(tuple(base[:2]), (wanted.channel, chain[-1].base), where, "blobs")
            chain.append(check_value(key, base, where, legacy=self.legacy))
        return chain, None


def write_value(
    conn: sqlite3.Connection, thread_id: str, ns: str, plan: PlannedValue, recent: RecentPayloads
) -> bool:
    """Write one planned value; return True if its full copy replaced a delta whose
    base changed since it was planned (another process deleted or rewrote it)."""
    value = plan.stored
    use_fallback = False
    if value.base is not None:
        base = conn.execute(SELECT_CRC, (thread_id, ns, value.channel, value.base)).fetchone()
        use_fallback = base is None or base[0] != plan.base_crc
    if use_fallback:
        assert plan.fallback is not None
        value = plan.fallback
    row = (
        thread_id,
        ns,
        value.channel,
        value.version,
        value.type,
        value.codec,
        value.data,
        value.base,
        value.crc,
        value_crc(thread_id, ns, value),
    )
    if conn.execute(INSERT_VALUE, row).rowcount == 0:
        # The version is already stored: an overwrite, which LangGraph itself never does.
        existing = conn.execute(
            SELECT_CRC, (thread_id, ns, value.channel, value.version)
        ).fetchone()
        if existing[0] != value.crc:
            _detach_dependents(conn, (thread_id, ns), value.channel, value.version, recent)
        conn.execute(REPLACE_VALUE, row)
    return use_fallback


def _detach_dependents(
    conn: sqlite3.Connection,
    key: tuple[str, str],
    channel: str,
    version: str,
    recent: RecentPayloads,
) -> None:
    """Before a stored version is overwritten with other content, store the deltas
    built on it as full copies, so they keep their values (read, so verified, first)."""
    thread_id, ns = key
    dependents = conn.execute(
        f"SELECT {VALUE_COLUMNS} FROM blobs"  # noqa: S608 - constant columns
        " WHERE thread_id = ? AND checkpoint_ns = ? AND channel = ? AND base_version = ?",
        (thread_id, ns, channel, version),
    ).fetchall()
    reader = ValueReader(conn, recent, legacy=True)
    for row in dependents:
        data = reader.read(key, row, Where("", thread_id, ns))
        full = StoredValue(channel, row[1], row[2], "", data, None, row[6])
        conn.execute(
            "UPDATE blobs SET codec = '', blob = ?, base_version = NULL, row_crc = ?"
            " WHERE thread_id = ? AND checkpoint_ns = ? AND channel = ? AND version = ?",
            (data, value_crc(thread_id, ns, full), thread_id, ns, channel, row[1]),
        )
    recent.discard((thread_id, ns, channel))


T = TypeVar("T")

# A write: prepare() runs outside the transaction and returns store(conn), which runs in
# it (under a savepoint) and returns finish(), which runs once the batch is committed.
Finish = Callable[[], None]
Store = Callable[[sqlite3.Connection], Finish]
Prepare = Callable[[], Store]


def plan_put(serde: SerializerProtocol, values: ValuePlanner, prepared: PreparedPut) -> Store:
    """Serialise a put's new values (planning append deltas on the payloads ``values``
    remembers); return what stores the checkpoint with them in an open transaction."""
    prepared = prepared.packed()
    thread_id, ns = prepared.thread_id, prepared.checkpoint_ns
    plans = [
        values.plan_new(serde, (thread_id, ns, channel), channel, key, prepared.values)
        for channel, _, key in prepared.new_versions
    ]
    key = (thread_id, ns, prepared.checkpoint_id)
    versions = json.dumps(prepared.version_keys)

    def store(conn: sqlite3.Connection) -> Finish:
        chosen = [write_value(conn, thread_id, ns, plan, values.recent) for plan in plans]
        (present,) = conn.execute(COUNT_VALUES, (versions, thread_id, ns)).fetchone()
        row = checkpoint_row(prepared, versions, present)
        if conn.execute(INSERT_CHECKPOINT, row).rowcount:
            conn.execute(UPSERT_HEAD, key)
        else:
            conn.execute(UPDATE_CHECKPOINT, row)
        return lambda: _remember(values, thread_id, ns, plans, chosen)

    return store


def _remember(
    values: ValuePlanner,
    thread_id: str,
    ns: str,
    plans: Sequence[PlannedValue],
    chosen: Sequence[bool],
) -> None:
    for plan, used_fallback in zip(plans, chosen, strict=True):
        remember = plan.remember_fallback if used_fallback else plan.remember
        if remember is not None:
            values.recent.put((thread_id, ns, plan.stored.channel), remember)


def store_writes(prepared: PreparedWrites, conn: sqlite3.Connection) -> Finish:
    """Store prepared writes in an open transaction: a regular write already stored is
    kept, a special one replaced; the checkpoint's digest of its writes is added to by
    what changed (never recounted, so a lost write stays detectable). Nothing is left to
    do once committed."""
    key = (prepared.thread_id, prepared.checkpoint_ns, prepared.checkpoint_id)
    task_id, task_path = prepared.task_id, prepared.task_path
    added, added_sum = 0, 0
    for w in prepared.writes:
        row = (*key, task_id, w.idx, w.channel, task_path, w.type, w.codec, w.data)
        crc = write_crc(row)
        if w.replaces:
            old = conn.execute(SELECT_WRITE_CRC, (*key, task_id, w.idx)).fetchone()
            if old is not None:
                added, added_sum = added - 1, added_sum - (old[0] or 0)
            conn.execute(f"INSERT OR REPLACE {INSERT_WRITE}", (*row, crc))
        elif not conn.execute(f"INSERT OR IGNORE {INSERT_WRITE}", (*row, crc)).rowcount:
            continue
        added, added_sum = added + 1, added_sum + crc
    if added or added_sum:
        conn.execute(ADD_TO_WRITES_DIGEST, (*key, added, added_sum))
    return _done


def _done() -> None:
    """Nothing to do once committed."""


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
        self._worker = BatchWorker("statekeeper-sqlite-writer", self._serve, self._closed)

    async def write(self, prepare: Prepare) -> None:
        """Queue a write and wait until it is committed (or raise its error)."""
        await self._worker.submit(_Write(prepare))

    async def read(self, call: Callable[[], T]) -> T:
        """Run ``call`` (a read with its own transaction) on the writer thread."""
        result: T = await self._worker.submit(_Read(call))
        return result

    def close(self) -> None:
        """Store the writes already queued, then stop the thread. Idempotent."""
        self._worker.close()

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

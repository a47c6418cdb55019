"""``SqliteCheckpointer``: the embedded default, on the standard library's ``sqlite3``.

Each channel value is stored once per (thread, namespace, channel, version): a checkpoint
writes only the channels in ``new_versions`` and reads unchanged channels from the version
written earlier, so a long conversation is not rewritten at every step. The schema and
its queries live in :mod:`statekeeper.backends.sqlite._queries`.

Concurrency: one connection per process behind a lock (LangGraph calls ``put`` from
background threads), WAL so readers never block writers, ``BEGIN IMMEDIATE`` so writers in
several processes queue for the lock instead of failing. The async API runs the same code
in a worker thread, so it never blocks the event loop.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    Checkpoint,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper._storage.claims import LockFileClaims, ProcessClaims
from statekeeper._storage.deltas import RecentPayloads, ValuePlanner
from statekeeper._storage.lineage import assemble_history
from statekeeper._storage.payload import EMPTY, decode, loads, safe_serde
from statekeeper.backends.sqlite import database_path
from statekeeper.backends.sqlite._database import MEMORY, Database
from statekeeper.backends.sqlite._queries import (
    COPY_COLUMNS,
    INSERT_WRITE,
    MIGRATIONS,
    SELECT_CHECKPOINTS,
    SELECT_VALUE,
    SELECT_VALUES,
    SELECT_WRITES,
    Raw,
    Raws,
    Row,
    Rows,
    delete_checkpoints,
    keep_latest,
    list_where,
    walk_ancestors,
)
from statekeeper.backends.sqlite._values import read_value, write_value
from statekeeper.checkpointers.base import Checkpointer, TaskWrite
from statekeeper.checkpointers.records import PreparedPut, PreparedWrites
from statekeeper.checkpointers.semantics import checkpoint_config, location, matches
from statekeeper.errors import ConfigurationError, ThreadExistsError
from statekeeper.urls import StorageURL, parse_options

__all__ = ["SqliteCheckpointer"]

TaskWrites = list[TaskWrite]

_LIST_PAGE = 100
_OPTIONS: dict[str, type] = {"busy_timeout": float, "compress": bool, "serde": object}


class SqliteCheckpointer(Checkpointer):
    """A LangGraph checkpointer in one SQLite file (or in memory with ``":memory:"``).

    Args:
        path: the database file; created with its parent directories if missing.
        serde: the serializer for every payload. The default (:func:`safe_serde`) is
            LangGraph's, allowed to rebuild data classes (pydantic models, dataclasses,
            enums, named tuples) from modules already imported and nothing else.
        busy_timeout: seconds a writer waits for another process's write lock.
        compress: zlib-compress payloads of 1 KiB or more when that saves space (lists
            that grow by appending are stored as append deltas instead).

    Guarantees: each ``put`` and ``put_writes`` is checked in full before anything is
    written (:class:`Checkpointer`), then stored in one transaction; a failed call stores
    nothing; payloads are never pickled; every SQL statement is parameterised; ids of any unicode
    text are stored exactly. Errors are :class:`~statekeeper.errors.StatekeeperError`\\ s.
    """

    def __init__(
        self,
        path: str = MEMORY,
        *,
        serde: SerializerProtocol | None = None,
        busy_timeout: float = 30.0,
        compress: bool = True,
    ) -> None:
        super().__init__(serde=serde or safe_serde())
        self.compress = compress
        # The last list payload written per (thread, ns, channel): the base of the next
        # append delta, and the bytes of the newest version without reading them back.
        self._recent = RecentPayloads()
        self._values = ValuePlanner(self._recent, compress)
        self._db = Database(
            path, component="checkpoints", migrations=MIGRATIONS, busy_timeout=busy_timeout
        )
        # claims live beside the database file: SQLite's storage is this machine's
        self._claims = (
            ProcessClaims()
            if path == MEMORY
            else LockFileClaims(Path(f"{self._db.path}-claims").absolute())
        )

    @classmethod
    def from_url(cls, url: StorageURL, options: Mapping[str, Any]) -> Self:
        """Open the database a ``sqlite://`` or ``memory://`` URL names, with its query
        options (text) and keyword ``options``; keywords win."""
        return cls(database_path(url), **parse_options("SQLite", _OPTIONS, url.options, options))

    @property
    def path(self) -> str:
        """The database file (``":memory:"`` for an in-memory database)."""
        return self._db.path

    # -- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        """Close the database. Idempotent; later calls raise StorageError."""
        self._db.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r})"

    # -- reading -----------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names, or the thread's newest in its namespace when it
        names none; ``None`` when there is no such checkpoint."""
        thread_id, ns, checkpoint_id = location(config)
        with self._db.transaction(write=False) as conn:
            if checkpoint_id is None:
                row = conn.execute(
                    SELECT_CHECKPOINTS + " WHERE thread_id = ? AND checkpoint_ns = ?"
                    " ORDER BY checkpoint_id DESC LIMIT 1",
                    (thread_id, ns),
                ).fetchone()
            else:
                row = conn.execute(
                    SELECT_CHECKPOINTS
                    + " WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?",
                    (thread_id, ns, checkpoint_id),
                ).fetchone()
            if row is None:
                return None
            raw = self._read_rest(conn, row)
        return self._decode(raw)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by checkpoint id, across threads when ``config`` is
        ``None``), whose metadata equals ``filter`` on every key, strictly older than
        ``before``; at most ``limit`` of them. Rows are read in pages, so a long history
        streams without holding the database lock between items."""
        if limit is not None and limit <= 0:
            return
        where, params = list_where(config, filter, before)
        remaining = limit
        after: tuple[str, str, str] | None = None
        while True:
            want = _LIST_PAGE if filter or remaining is None else min(remaining, _LIST_PAGE)
            raws, after, exhausted = self._list_page(where, params, filter, after, want)
            for raw in raws:
                yield self._decode(raw)
                if remaining is not None:
                    remaining -= 1
                    if remaining == 0:
                        return
            if exhausted:
                return

    def _list_page(
        self,
        where: Sequence[str],
        params: Sequence[Any],
        filter: dict[str, Any] | None,
        after: tuple[str, str, str] | None,
        size: int,
    ) -> tuple[Raws, tuple[str, str, str] | None, bool]:
        clauses, args = [*where], [*params]
        if after is not None:
            clauses.append("(checkpoint_id, thread_id, checkpoint_ns) < (?, ?, ?)")
            args.extend(after)
        sql = SELECT_CHECKPOINTS
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        sql += " ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC LIMIT ?"
        with self._db.transaction(write=False) as conn:
            rows = conn.execute(sql, (*args, size)).fetchall()
            memo: dict[tuple[str, ...], bytes] = {}  # checkpoints of a page share values
            raws = [
                self._read_rest(conn, row, memo)
                for row in rows
                if not filter or matches(json.loads(row[7]), filter)
            ]
        last = (rows[-1][2], rows[-1][0], rows[-1][1]) if rows else None
        return raws, last, len(rows) < size

    def _read_rest(
        self, conn: sqlite3.Connection, row: Row, memo: dict[tuple[str, ...], bytes] | None = None
    ) -> Raw:
        thread_id, ns, checkpoint_id = row[0], row[1], row[2]
        values = [
            (
                value[0],
                value[2],
                read_value(conn, thread_id, ns, value, {} if memo is None else memo, self._recent),
            )
            for value in conn.execute(SELECT_VALUES, (row[8], thread_id, ns))
            if value[2] != EMPTY[0]
        ]
        writes = conn.execute(SELECT_WRITES, (thread_id, ns, checkpoint_id)).fetchall()
        return row, values, writes

    def _decode(self, raw: Raw) -> CheckpointTuple:
        row, value_rows, write_rows = raw
        thread_id, ns, checkpoint_id, parent_id, type_, codec, blob, metadata, _ = row
        checkpoint: Checkpoint = decode(self.serde, type_, codec, blob)
        checkpoint["channel_values"] = {
            channel: loads(self.serde, kind, data) for channel, kind, data in value_rows
        }
        return CheckpointTuple(
            config=checkpoint_config(thread_id, ns, checkpoint_id),
            checkpoint=checkpoint,
            metadata=json.loads(metadata),
            parent_config=checkpoint_config(thread_id, ns, parent_id) if parent_id else None,
            pending_writes=[
                (w.task_id, w.channel, w.value) for w in self._decode_writes(write_rows)
            ],
        )

    def _decode_writes(self, rows: Rows) -> TaskWrites:
        rows.sort(key=lambda w: writes_sort_key(w[5], w[0], w[6]))
        return [
            TaskWrite(task_id, path, channel, decode(self.serde, t, c, v))
            for task_id, channel, t, c, v, path, _ in rows
        ]

    def get_writes(self, config: RunnableConfig) -> TaskWrites:
        thread_id, ns, checkpoint_id = location(config)
        if checkpoint_id is None:
            raise ConfigurationError("get_writes needs a checkpoint_id in the config")
        with self._db.transaction(write=False) as conn:
            rows = conn.execute(SELECT_WRITES, (thread_id, ns, checkpoint_id)).fetchall()
        return self._decode_writes(rows)

    def _claim(self, thread_id: str) -> contextlib.AbstractContextManager[None]:
        return self._claims.claim(thread_id)  # a lock file beside the database

    def _claim_holder(self, thread_id: str) -> dict[str, Any] | None:
        return self._claims.holder(thread_id)

    # -- storing (checked and prepared by Checkpointer) ---------------------------------

    def _commit_put(self, prepared: PreparedPut) -> None:
        """Store a prepared checkpoint and its new values in one transaction. The values
        are serialised (and append deltas planned) before it begins."""
        thread_id, ns = prepared.thread_id, prepared.checkpoint_ns
        plan_new, serde, values = self._values.plan_new, self.serde, prepared.values
        plans = [
            plan_new(serde, (thread_id, ns, channel), channel, key, values)
            for channel, _, key in prepared.new_versions
        ]
        checkpoint_row = (
            thread_id,
            ns,
            prepared.checkpoint_id,
            prepared.parent_id,
            prepared.run_id,
            *prepared.checkpoint,
            prepared.metadata_json,
            json.dumps(prepared.version_keys),
        )
        with self._db.transaction(write=True) as conn:
            chosen = [write_value(conn, thread_id, ns, plan, self._recent) for plan in plans]
            conn.execute(
                "INSERT OR REPLACE INTO checkpoints VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                checkpoint_row,
            )
        for plan, used_fallback in zip(plans, chosen, strict=True):
            remember = plan.remember_fallback if used_fallback else plan.remember
            if remember is not None:
                self._recent.put((thread_id, ns, plan.stored.channel), remember)

    def _commit_writes(self, prepared: PreparedWrites) -> None:
        """Store prepared writes in one transaction: ``INSERT OR IGNORE`` keeps a regular
        write already stored, ``INSERT OR REPLACE`` replaces a special one."""
        head = (prepared.thread_id, prepared.checkpoint_ns, prepared.checkpoint_id)
        task_id, task_path = prepared.task_id, prepared.task_path
        keep: list[tuple[Any, ...]] = []
        replace: list[tuple[Any, ...]] = []
        for w in prepared.writes:
            row = (*head, task_id, w.idx, w.channel, task_path, w.type, w.codec, w.data)
            (replace if w.replaces else keep).append(row)
        with self._db.transaction(write=True) as conn:
            conn.executemany(f"INSERT OR IGNORE {INSERT_WRITE}", keep)
            conn.executemany(f"INSERT OR REPLACE {INSERT_WRITE}", replace)

    def _delete_threads(self, thread_ids: Sequence[str]) -> None:
        """One transaction per thread, so a long list never holds the write lock long."""
        for thread_id in thread_ids:
            with self._db.transaction(write=True) as conn:
                for table in ("checkpoints", "blobs", "writes"):
                    conn.execute(f"DELETE FROM {table} WHERE thread_id = ?", (thread_id,))  # noqa: S608

    def _delete_runs(self, run_ids: Sequence[str]) -> None:
        with self._db.transaction(write=True) as conn:
            doomed = conn.execute(
                "SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints"
                " WHERE run_id IN (SELECT value FROM json_each(?))",
                (json.dumps(list(run_ids)),),
            ).fetchall()
            delete_checkpoints(conn, doomed)

    def _copy_thread(self, source: str, target: str) -> None:
        """Copy the whole parent chain (all namespaces), values and writes in one
        transaction; ThreadExistsError (nothing changed) if the target has checkpoints."""
        with self._db.transaction(write=True) as conn:
            if conn.execute(
                "SELECT 1 FROM checkpoints WHERE thread_id = ? LIMIT 1", (target,)
            ).fetchone():
                raise ThreadExistsError(
                    f"cannot copy thread {source!r} into {target!r}: {target!r} already has "
                    "checkpoints; delete it first or choose a new thread id"
                )
            for table, columns in COPY_COLUMNS.items():
                conn.execute(
                    f"INSERT INTO {table} SELECT ?, {columns} FROM {table} WHERE thread_id = ?",  # noqa: S608
                    (target, source),
                )

    def _keep_latest(self, ids: Sequence[str]) -> None:
        with self._db.transaction(write=True) as conn:
            for thread_id in ids:
                namespaces = conn.execute(
                    "SELECT DISTINCT checkpoint_ns FROM checkpoints WHERE thread_id = ?",
                    (thread_id,),
                ).fetchall()
                for (ns,) in namespaces:
                    keep_latest(conn, thread_id, ns)

    # -- DeltaChannel support ------------------------------------------------------------

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Per channel: the writes on the target's ancestor path (oldest first, each
        checkpoint's in ``writes_sort_key`` order) back to the nearest ancestor holding a
        value, which is the ``seed``. Three queries, whatever the chain length."""
        if not channels:
            return {}
        thread_id, ns, checkpoint_id = location(config)
        with self._db.transaction(write=False) as conn:
            if checkpoint_id is None:
                newest = conn.execute(
                    "SELECT checkpoint_id FROM checkpoints WHERE thread_id = ? AND"
                    " checkpoint_ns = ? ORDER BY checkpoint_id DESC LIMIT 1",
                    (thread_id, ns),
                ).fetchone()
                checkpoint_id = newest[0] if newest else None
            chains: dict[str, list[str]] = {ch: [] for ch in channels}
            seeds: dict[str, tuple[str, bytes]] = {}
            if checkpoint_id is not None:
                chains, seed_versions = walk_ancestors(conn, thread_id, ns, checkpoint_id, channels)
                for ch, version in seed_versions.items():
                    row = conn.execute(SELECT_VALUE, (thread_id, ns, ch, version)).fetchone()
                    seeds[ch] = (row[2], read_value(conn, thread_id, ns, row, {}, self._recent))
            write_rows = {
                ch: conn.execute(
                    "SELECT checkpoint_id, task_id, type, codec, value, task_path, idx"
                    " FROM writes WHERE thread_id = ? AND checkpoint_ns = ? AND channel = ?"
                    " AND checkpoint_id IN (SELECT value FROM json_each(?))",
                    (thread_id, ns, ch, json.dumps(chain)),
                ).fetchall()
                for ch, chain in chains.items()
                if chain
            }
        by_checkpoint: dict[tuple[str, str], list[Row]] = {}
        for ch, rows in write_rows.items():
            for row in rows:
                by_checkpoint.setdefault((row[0], ch), []).append(row)

        def writes_of(checkpoint_id: str, ch: str) -> list[PendingWrite]:
            ordered = sorted(
                by_checkpoint.get((checkpoint_id, ch), []),
                key=lambda w: writes_sort_key(w[5], w[1], w[6]),
            )
            return [
                (task_id, ch, decode(self.serde, t, c, v)) for _, task_id, t, c, v, _, _ in ordered
            ]

        return assemble_history(
            channels,
            chains,
            {ch: loads(self.serde, *seed) for ch, seed in seeds.items()},
            writes_of,
        )

"""``PostgresCheckpointer``: checkpoints in PostgreSQL, on psycopg 3 and its pools.

Each channel value is stored once per (thread, namespace, channel, version), and a list
that grew by appending as the bytes it added (:mod:`statekeeper._storage.deltas`), so a
long conversation is not rewritten at every step. A ``put`` and a ``put_writes`` are one
statement each (one round trip, one transaction); a read of a checkpoint with its values
and writes is one statement too. The schema and statements: :mod:`._schema`.

Integrity: every row a read turns into state carries a checksum, and what rows cannot
say about themselves (a lost value, write or checkpoint row) is kept by the rows that
list them (:mod:`._integrity`); damage raises
:class:`~statekeeper.errors.CorruptCheckpointError`, or with ``on_corrupt="fallback"``
is skipped with a warning; :meth:`PostgresCheckpointer.verify` checks everything.

Concurrency: a pool of connections serves the sync API (thread-safe). The async API's
calls of a turn (``aget_tuple``, ``aput``, ``aput_writes``) queue for one thread that sends
those waiting in one round trip and one transaction on that pool
(:func:`._running.serve`); its other calls use an asyncio pool per event loop. The same
operations run on all of them (:mod:`._running`). Claims are advisory
locks held by a connection of their own, so the server releases them when the holder
dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any, Self, TypeVar

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, DeltaChannelHistory
from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg import sql

from statekeeper._storage.deltas import PlannedValue, ValuePlanner
from statekeeper._storage.payload import safe_serde
from statekeeper._storage.remembered import RecentPayloads
from statekeeper._storage.worker import BatchWorker
from statekeeper.backends.postgres import (
    POOL_OPTIONS,
    Connection,
    check_key,
    connect_error,
    decode_id,
    encode_id,
    split_options,
)
from statekeeper.backends.postgres._claims import Claims
from statekeeper.backends.postgres._database import Database, lock_key
from statekeeper.backends.postgres._integrity import Where, with_location
from statekeeper.backends.postgres._listing import Listing
from statekeeper.backends.postgres._maintenance import Maintenance, verify
from statekeeper.backends.postgres._reads import Raw, Reader, decode_raw, decode_writes
from statekeeper.backends.postgres._running import BEGIN, COMMIT, Call, Op, Q, serve
from statekeeper.backends.postgres._schema import MIGRATIONS, THREAD_HEADS, THREAD_HEADS_AFTER
from statekeeper.backends.postgres._writes import put, put_writes
from statekeeper.checkpointers.base import Checkpointer, TaskWrite
from statekeeper.checkpointers.heads import Head
from statekeeper.checkpointers.records import PreparedPut, PreparedWrites
from statekeeper.checkpointers.semantics import ON_CORRUPT, check_choice, check_limit, location
from statekeeper.errors import ConfigurationError, CorruptCheckpointError, Damage, StorageError
from statekeeper.urls import OptionKind, StorageURL, check_option, parse_options

__all__ = ["PostgresCheckpointer"]

T = TypeVar("T")
TaskWrites = list[TaskWrite]
Damages = list[Damage]  # named here: the class has a method called list
Plans = list[PlannedValue]
Chosen = list[bool]
Heads = list[Head]
logger = logging.getLogger(__name__)

# every table of the "checkpoints" component (._schema), and the record of migrations
_TABLES = (
    *("checkpoints", "blobs", "writes", "write_counts", "heads", "claims"),
    "statekeeper_migrations",
)

_OPTIONS: dict[str, OptionKind] = {
    **POOL_OPTIONS,
    "compress": bool,
    "serde": object,
    "on_corrupt": str,
}


def _check_put(prepared: PreparedPut) -> None:
    """Refuse ids the server could not index (:func:`check_key`), before sending any."""
    t, ns = prepared.thread_id, prepared.checkpoint_ns
    check_key("a thread id, namespace and checkpoint id", t, ns, prepared.checkpoint_id)
    for channel, _, key in prepared.new_versions:
        check_key("a thread id, namespace, channel name and version", t, ns, channel, key)
    if prepared.run_id is not None:
        check_key("a run id", prepared.run_id)


def _check_writes(prepared: PreparedWrites) -> None:
    """:func:`_check_put` for pending writes."""
    what = "a thread id, namespace, checkpoint id and task id"
    p = prepared
    check_key(what, p.thread_id, p.checkpoint_ns, p.checkpoint_id, p.task_id)


class PostgresCheckpointer(Checkpointer):
    """A LangGraph checkpointer in a PostgreSQL schema.

    Args:
        connection: where to connect and how (:class:`~statekeeper.backends.postgres.Connection`:
            the libpq connection string, ``schema`` (default ``statekeeper``), ``mode``
            (``"ro"``: every connection is read-only, nothing is created, writes raise
            :class:`~statekeeper.errors.ReadOnlyError`), pool sizes, ``retries``).
        serde: the serializer for every payload (default :func:`safe_serde`).
        compress: zlib-compress payloads of 4 KB or more when that saves space.
        on_corrupt: ``"raise"`` (default) or ``"fallback"``, as for SQLite.

    Guarantees: each ``put`` and ``put_writes`` is checked in full before anything is
    written, then stored in one statement (all or nothing); payloads are never pickled;
    every statement is parameterised; ids of any unicode text are stored exactly. An
    operation whose connection was lost is run again on a new one (``retries``), which is
    safe since each is idempotent (``copy_thread`` is not retried); errors are
    :class:`~statekeeper.errors.StatekeeperError`\\ s.
    """

    # Only payloads of 4 KB and more are compressed (on the other backends, 256 bytes and
    # more): a chat turn's are smaller, and compressing them in LangGraph's background
    # threads made a turn a tenth slower (docs/postgres.md), to save bytes on a server
    # that compresses rows of over 2 KB itself (TOAST).
    compress_min_bytes = 4096

    def __init__(
        self,
        connection: Connection,
        *,
        serde: SerializerProtocol | None = None,
        compress: bool = True,
        on_corrupt: str = "raise",
    ) -> None:
        super().__init__(serde=serde or safe_serde())
        self.on_corrupt = check_choice("on_corrupt", on_corrupt, ON_CORRUPT)
        self.compress = check_option("compress", bool, compress)
        self._recent = RecentPayloads()
        self._values = ValuePlanner(self._recent, compress, self.compress_min_bytes)
        self._db = Database(connection, component="checkpoints", migrations=MIGRATIONS)
        self.read_only = self._db.read_only
        self._reader = Reader(self._db.display, self._recent)
        self._claims = Claims(self._db)
        self._worker = BatchWorker(
            "statekeeper-postgres", partial(serve, self._db), self._db.closed_error
        )

    @classmethod
    def from_url(cls, url: StorageURL, options: Mapping[str, Any]) -> Self:
        """Open the schema a ``postgres://`` URL names, with its query options (text:
        ``?schema=app&mode=ro``...; libpq's own, such as ``sslmode``, go to libpq) and
        keyword ``options``; keywords win."""
        merged = parse_options("PostgreSQL", _OPTIONS, split_options(url), options)
        pool = {k: merged.pop(k) for k in list(merged) if k in POOL_OPTIONS}
        return cls(Connection.from_url(url, pool), **merged)

    def close(self) -> None:
        """Close the pools (after the async calls already queued). Idempotent; later calls
        raise StorageError."""
        self._worker.close()
        self._db.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._db.display!r})"

    @property
    def schema(self) -> str:
        """The schema the tables live in."""
        return self._db.schema

    # -- running operations ------------------------------------------------------------

    def _read(self, make: Callable[[], Op[T]]) -> T:
        return self._db.run(make)

    # -- reading -----------------------------------------------------------------------

    def _get_op(
        self, config: RunnableConfig
    ) -> tuple[Where, str | None, Callable[[], Op[Raw | None]]]:
        thread_id, ns, checkpoint_id = location(config)
        where = Where(self._db.display, thread_id, ns, checkpoint_id)
        t, n = encode_id(thread_id), encode_id(ns)
        if checkpoint_id is None:
            return where, None, lambda: self._reader.newest((t, n))
        stored_id = encode_id(checkpoint_id)
        return where, checkpoint_id, lambda: self._reader.one((t, n, stored_id))

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names, or the thread's newest in its namespace when it
        names none; ``None`` when there is no such checkpoint.

        Raises:
            CorruptCheckpointError: something it needs is damaged or missing (with
                ``on_corrupt="fallback"``, the newest is replaced by the newest intact
                checkpoint instead; one asked for by id never is).
        """
        where, checkpoint_id, make = self._get_op(config)
        try:
            raw = self._db.run(make)
            return None if raw is None else decode_raw(self.serde, raw, self._recent)
        except CorruptCheckpointError as exc:
            return self._fallback(exc, where, checkpoint_id, self._listing().items)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        where, checkpoint_id, make = self._get_op(config)
        try:
            raw = await self._worker.submit(Call(make))
            return None if raw is None else decode_raw(self.serde, raw, self._recent)
        except CorruptCheckpointError as exc:
            # the fallback listing is rare: run it in a worker thread
            return await asyncio.to_thread(
                self._fallback, exc, where, checkpoint_id, self._listing().items
            )

    def _fallback(
        self,
        exc: CorruptCheckpointError,
        where: Where,
        checkpoint_id: str | None,
        items: Callable[..., Iterator[CheckpointTuple]],
    ) -> CheckpointTuple | None:
        located = with_location(exc, where)
        if checkpoint_id is not None or self.on_corrupt != "fallback":
            if located is exc:
                raise exc
            raise located from exc
        logger.warning("skipped damaged data (on_corrupt=fallback): %s", located)
        scope: RunnableConfig = {
            "configurable": {"thread_id": where.thread_id, "checkpoint_ns": where.checkpoint_ns}
        }
        return next(items(scope, quiet=located.checkpoint_id), None)

    def _listing(self) -> Listing:
        return Listing(self._db, self._reader, self.serde, self.on_corrupt)

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
        ``before``; at most ``limit`` of them, read in pages. A listing of whole threads
        ends by checking the head records, so a lost checkpoint row raises
        :class:`CorruptCheckpointError` after the last item."""
        yield from self._listing().items(
            config, filter=filter, before=before, limit=check_limit(limit)
        )

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        limit = check_limit(limit)
        async for item in self._listing().aitems(config, filter=filter, before=before, limit=limit):
            yield item

    def _writes_op(self, config: RunnableConfig) -> tuple[Where, Callable[[], Op[Any]]]:
        thread_id, ns, checkpoint_id = location(config)
        if checkpoint_id is None:
            raise ConfigurationError("get_writes needs a checkpoint_id in the config")
        key = (encode_id(thread_id), encode_id(ns), encode_id(checkpoint_id))
        return Where(self._db.display, thread_id, ns, checkpoint_id), lambda: self._reader.writes(
            key
        )

    def _thread_heads(self, limit: int, after: Head | None) -> Heads:
        """A page of the ``heads`` table's root rows by the ``heads_threads`` index."""

        def make() -> Op[Any]:
            if after is None:
                return (yield Q(THREAD_HEADS, (limit,)))
            stored = (encode_id(after.checkpoint_id), encode_id(after.thread_id))
            return (yield Q(THREAD_HEADS_AFTER, (*stored, limit)))

        rows = self._db.run(make)
        return [Head(decode_id(thread_id), decode_id(newest)) for thread_id, newest in rows]

    def get_writes(self, config: RunnableConfig) -> TaskWrites:
        where, make = self._writes_op(config)
        try:
            rows = self._db.run(make)
        except CorruptCheckpointError as exc:
            raise with_location(exc, where) from exc
        return decode_writes(self.serde, rows)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Per channel: the writes on the target's ancestor path (oldest first, each
        checkpoint's in ``writes_sort_key`` order) back to the nearest ancestor holding a
        value, which is the ``seed``. Every row read is verified."""
        if not channels:
            return {}
        thread_id, ns, checkpoint_id = location(config)
        if checkpoint_id is None:
            newest = self.get_tuple(config)
            if newest is None:
                return {ch: {"writes": []} for ch in channels}
            checkpoint_id = newest.config["configurable"]["checkpoint_id"]
        key = (encode_id(thread_id), encode_id(ns), encode_id(checkpoint_id))
        where = Where(self._db.display, thread_id, ns, checkpoint_id)
        try:
            return self._db.run(lambda: self._reader.delta_history(self.serde, key, channels))
        except CorruptCheckpointError as exc:
            raise with_location(exc, where) from exc

    # -- claims ----------------------------------------------------------------------------

    def _claim(self, thread_id: str) -> contextlib.AbstractContextManager[None]:
        check_key("a thread id", thread_id)
        return self._claims.claim(thread_id)

    def _claim_holder(self, thread_id: str) -> dict[str, Any] | None:
        return self._claims.holder(thread_id)

    # -- storing (checked and prepared by Checkpointer) ---------------------------------

    def _plans(self, prepared: PreparedPut) -> Plans:
        t, ns = encode_id(prepared.thread_id), encode_id(prepared.checkpoint_ns)
        plan_new, serde, values = self._values.plan_new, self.serde, prepared.values
        return [
            plan_new(serde, (t, ns, encode_id(channel)), channel, key, values)
            for channel, _, key in prepared.new_versions
        ]

    def _remember(self, prepared: PreparedPut, plans: Plans, chosen: Chosen) -> None:
        t, ns = encode_id(prepared.thread_id), encode_id(prepared.checkpoint_ns)
        for plan, used_fallback in zip(plans, chosen, strict=True):
            remember = plan.remember_fallback if used_fallback else plan.remember
            if remember is not None:
                self._recent.put((t, ns, encode_id(plan.stored.channel)), remember)

    def _commit_put(self, prepared: PreparedPut) -> None:
        _check_put(prepared)
        plans = self._plans(prepared)
        chosen = self._db.run(lambda: put(prepared, plans, self._reader), write=True)
        self._remember(prepared, plans, chosen)

    async def _acommit_put(self, prepared: PreparedPut) -> None:
        _check_put(prepared)
        plans = self._plans(prepared)
        chosen = await self._worker.submit(Call(lambda: put(prepared, plans, self._reader), True))
        self._remember(prepared, plans, chosen)

    def _commit_writes(self, prepared: PreparedWrites) -> None:
        _check_writes(prepared)
        self._db.run(lambda: put_writes(prepared), write=True)

    async def _acommit_writes(self, prepared: PreparedWrites) -> None:
        _check_writes(prepared)
        await self._worker.submit(Call(lambda: put_writes(prepared), write=True))

    def _maintenance(self) -> Maintenance:
        return Maintenance(self._reader)

    def _delete_threads(self, thread_ids: Sequence[str]) -> None:
        for thread_id in thread_ids:
            self._db.run(
                partial(self._maintenance().delete_thread, encode_id(thread_id)), write=True
            )

    async def _adelete_threads(self, thread_ids: Sequence[str]) -> None:
        for thread_id in thread_ids:
            stored = encode_id(thread_id)
            await self._db.arun(partial(self._maintenance().delete_thread, stored), write=True)

    def _delete_runs(self, run_ids: Sequence[str]) -> None:
        ids = [encode_id(r) for r in run_ids]
        self._db.run(lambda: self._maintenance().delete_runs(ids), write=True)

    async def _adelete_runs(self, run_ids: Sequence[str]) -> None:
        ids = [encode_id(r) for r in run_ids]
        await self._db.arun(lambda: self._maintenance().delete_runs(ids), write=True)

    def _copy_thread(self, source: str, target: str) -> None:
        check_key("a thread id", target)
        s, t = encode_id(source), encode_id(target)
        self._db.run(lambda: self._maintenance().copy_thread(s, t), write=True, retries=0)

    async def _acopy_thread(self, source: str, target: str) -> None:
        check_key("a thread id", target)
        s, t = encode_id(source), encode_id(target)
        await self._db.arun(lambda: self._maintenance().copy_thread(s, t), write=True, retries=0)

    def _keep_latest(self, ids: Sequence[str]) -> None:
        stored = [encode_id(i) for i in ids]
        self._db.run(lambda: self._maintenance().keep_latest(stored), write=True)

    async def _akeep_latest(self, ids: Sequence[str]) -> None:
        stored = [encode_id(i) for i in ids]
        await self._db.arun(lambda: self._maintenance().keep_latest(stored), write=True)

    # -- discarding an emptied schema ----------------------------------------------------

    @staticmethod
    def schema_exists(url: StorageURL) -> bool:
        """Whether the schema a ``postgres://`` URL names exists at all (holding anything
        or not); reads only, creates nothing.

        Raises:
            StorageError: the server cannot be reached.
            ConfigurationError: the URL is malformed, or connecting with it cannot work
                (:func:`~statekeeper.backends.postgres.connect_error`).
        """
        merged = parse_options("PostgreSQL", _OPTIONS, split_options(url), {})
        pool = {k: merged.pop(k) for k in list(merged) if k in POOL_OPTIONS}
        connection = Connection.from_url(url, pool)
        try:
            conn = psycopg.connect(connection.conninfo, autocommit=True)
        except psycopg.Error as exc:
            raise connect_error(connection, exc) from exc
        try:
            with conn:
                found = conn.execute(
                    "SELECT 1 FROM pg_namespace WHERE nspname = %s", (connection.schema,)
                ).fetchone()
        except psycopg.Error as exc:
            raise StorageError(f"cannot reach {connection.display}: {exc}") from exc
        return found is not None

    def discard_schema_if_empty(self) -> bool:
        """Drop this checkpointer's tables and then its schema, in one transaction, if
        they hold no checkpoint, value or write and the schema holds nothing else (no
        other component's tables, no object of anyone else: ``DROP ... RESTRICT``);
        whether it was dropped. Only for a schema this process created and left empty
        (a failed ``copy`` or ``import``): the caller decides that, before opening.

        Raises:
            ReadOnlyError: on a read-only checkpointer.
        """
        self._writable("discard the schema")
        try:
            return self._db.run(self._discard_schema, write=True, retries=0)
        except StorageError:
            return False  # something else is in the schema: it stays, whole

    def _discard_schema(self) -> Op[bool]:
        schema = sql.Identifier(self.schema)
        yield BEGIN
        yield Q("SELECT pg_advisory_xact_lock(%s)", (lock_key("statekeeper-migrate", self.schema),))
        held = yield Q(
            sql.SQL(
                "SELECT EXISTS (SELECT 1 FROM {s}.checkpoints) OR EXISTS (SELECT 1 FROM "
                "{s}.blobs) OR EXISTS (SELECT 1 FROM {s}.writes) OR EXISTS (SELECT 1 FROM "
                "{s}.statekeeper_migrations WHERE component <> %s)"
            ).format(s=schema),
            ("checkpoints",),
            "one",
        )
        if held[0]:
            yield Q("ROLLBACK", fetch="count")
            return False
        tables = sql.SQL(", ").join(sql.Identifier(self.schema, t) for t in _TABLES)
        yield Q(sql.SQL("DROP TABLE {} RESTRICT").format(tables), fetch="count")
        yield Q(sql.SQL("DROP SCHEMA {} RESTRICT").format(schema), fetch="count")
        yield COMMIT
        return True

    # -- integrity -----------------------------------------------------------------------

    def verify(self, *, repair: bool = False) -> Damages:
        """Check every record of every thread — checkpoints, metadata, values and deltas
        (rebuilt and checked), pending writes and their digests, head records — and return
        what is damaged (``[]``: all intact). ``repair=True`` (read-write only) rebuilds
        head records and writes digests from the rows stored; it deletes and rewrites
        nothing else (damaged rows stay, and reads keep raising on them).

        Raises:
            ReadOnlyError: ``repair`` on a read-only schema.
        """
        if repair:
            self._writable("verify(repair=True)")
        return verify(self._db, self._reader, self.serde, repair=repair)

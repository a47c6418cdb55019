"""``SqliteCheckpointer``: the embedded default, on the standard library's ``sqlite3``.

Each channel value is stored once per (thread, namespace, channel, version): a checkpoint
writes only the channels in ``new_versions`` and reads unchanged channels from the version
written earlier, so a long conversation is not rewritten at every step. The schema and
its queries live in :mod:`statekeeper.backends.sqlite._queries`.

Integrity: every row a read turns into state carries a checksum, and what rows cannot
say about themselves (a lost value, write or checkpoint row) is kept by the rows that
list them (:mod:`._integrity`); every read verifies what it uses (:mod:`._reads`). Damage
raises :class:`~statekeeper.errors.CorruptCheckpointError`, or with
``on_corrupt="fallback"`` is skipped with a warning; :meth:`SqliteCheckpointer.verify`
checks everything (:mod:`._maintenance`).

Concurrency: one connection per process behind a lock (LangGraph calls ``put`` from
background threads), WAL so readers never block writers, ``BEGIN IMMEDIATE`` so writers in
several processes queue for the lock instead of failing. The async API never blocks the
event loop: a turn's calls queue for one thread, which commits each batch of writes in one
transaction (:mod:`._values`); the others run the same code in a worker thread.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, DeltaChannelHistory
from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper._storage.claims import LockFileClaims, ProcessClaims
from statekeeper._storage.deltas import ValuePlanner
from statekeeper._storage.payload import safe_serde
from statekeeper._storage.remembered import RecentPayloads
from statekeeper.backends.sqlite import database_path
from statekeeper.backends.sqlite._database import MEMORY, Database
from statekeeper.backends.sqlite._integrity import (
    Where,
    check_writes,
    with_location,
)
from statekeeper.backends.sqlite._maintenance import Maintenance
from statekeeper.backends.sqlite._queries import (
    HEADS_VERSION,
    MIGRATIONS,
    SELECT_WRITES,
    SELECT_WRITES_DIGEST,
    THREAD_HEADS,
    THREAD_HEADS_AFTER,
    CheckpointRow,
    Raw,
    list_where,
    page_query,
)
from statekeeper.backends.sqlite._reads import (
    Cursor,
    Page,
    Rules,
    decode_raw,
    decode_writes,
    delta_history,
    load_rules,
    newest,
    one,
    read_page,
    read_rest,
    scope_damage,
)
from statekeeper.backends.sqlite._values import GroupCommit, plan_put, store_writes
from statekeeper.checkpointers.base import Checkpointer, TaskWrite
from statekeeper.checkpointers.heads import Head
from statekeeper.checkpointers.records import PreparedPut, PreparedWrites
from statekeeper.checkpointers.semantics import (
    ON_CORRUPT,
    before_id,
    check_choice,
    check_limit,
    list_scope,
    location,
    metadata_index_keys,
)
from statekeeper.errors import ConfigurationError, CorruptCheckpointError, Damage
from statekeeper.urls import OptionKind, StorageURL, check_option, parse_options

__all__ = ["SqliteCheckpointer"]

TaskWrites = list[TaskWrite]
Damages = list[Damage]  # named here: the class has a method called list
Heads = list[Head]

logger = logging.getLogger(__name__)


_LIST_PAGE = 100
_OPTIONS: dict[str, OptionKind] = {
    "busy_timeout": float,
    "compress": bool,
    "serde": object,
    "mode": str,
    "on_corrupt": str,
    "index_metadata": (str, list, tuple),  # comma-separated in a URL; a list as a keyword
}


class SqliteCheckpointer(Checkpointer):
    """A LangGraph checkpointer in one SQLite file (or in memory with ``":memory:"``).

    Args:
        path: the database file; created with its parent directories if missing
            (read-write mode).
        serde: the serializer for every payload. The default (:func:`safe_serde`) is
            LangGraph's, allowed to rebuild data classes (pydantic models, dataclasses,
            enums, named tuples) from modules already imported and nothing else.
        busy_timeout: seconds a writer waits for another process's write lock.
        compress: zlib-compress payloads (append deltas included) of 256 bytes or more
            when that saves space.
        mode: ``"rw"`` (default) or ``"ro"``: read-only, which never creates or changes
            anything (a missing file raises :class:`~statekeeper.errors.StorageNotFoundError`)
            and refuses every write and claim with :class:`~statekeeper.errors.ReadOnlyError`.
            A file (or directory) that is not writable is opened read-only too.
        on_corrupt: ``"raise"`` (default) raises :class:`CorruptCheckpointError` when a
            record a read needs is damaged; ``"fallback"`` logs a warning naming it on the
            ``statekeeper.backends.sqlite.checkpointer`` logger and skips it:
            ``get_tuple`` returns the newest intact checkpoint, ``list`` the intact ones.
            A checkpoint asked for by id is never substituted: it loads or raises.

    Guarantees: each ``put`` and ``put_writes`` is checked in full before anything is
    written (:class:`Checkpointer`), then stored in one transaction; a failed call stores
    nothing; payloads are never pickled; every SQL statement is parameterised; ids of any
    unicode text are stored exactly. A read returns exactly what was stored or raises
    (:mod:`._integrity` says what is checked). Errors are
    :class:`~statekeeper.errors.StatekeeperError`\\ s.
    """

    def __init__(
        self,
        path: str = MEMORY,
        *,
        serde: SerializerProtocol | None = None,
        busy_timeout: float = 30.0,
        compress: bool = True,
        mode: str = "rw",
        on_corrupt: str = "raise",
    ) -> None:
        super().__init__(serde=serde or safe_serde())
        self.on_corrupt = check_choice("on_corrupt", on_corrupt, ON_CORRUPT)
        self.compress = check_option("compress", bool, compress)
        # The last list payload written per (thread, ns, channel): the base of the next
        # append delta, and the bytes of the newest version without reading them back.
        self._recent = RecentPayloads()
        self._values = ValuePlanner(self._recent, compress)
        self._db = Database(
            path,
            component="checkpoints",
            migrations=MIGRATIONS,
            busy_timeout=busy_timeout,
            mode=mode,
            lenient_text=True,
        )
        self.read_only = self._db.read_only
        self._group = GroupCommit(self._db)  # the async API's writes, batched
        # claims live beside the database file: SQLite's storage is this machine's
        self._claims = (
            ProcessClaims()
            if path == MEMORY
            else LockFileClaims(Path(f"{self._db.path}-claims").absolute())
        )
        self._rules = self._load_rules()

    @classmethod
    def from_url(cls, url: StorageURL, options: Mapping[str, Any]) -> Self:
        """Open the database a ``sqlite://`` or ``memory://`` URL names, with its query
        options (text: ``?mode=ro``, ``?on_corrupt=fallback``, ``?index_metadata=a,b``...)
        and keyword ``options``; keywords win. ``index_metadata`` calls
        :meth:`index_metadata` once open (read-write; read-only, it is ignored)."""
        merged = parse_options("SQLite", _OPTIONS, url.options, options)
        keys = metadata_index_keys(merged.pop("index_metadata", ()))
        saver = cls(database_path(url), **merged)
        if keys and not saver.read_only:
            try:
                saver.index_metadata(*keys)
            except BaseException:
                saver.close()
                raise
        return saver

    @property
    def path(self) -> str:
        """The database file (``":memory:"`` for an in-memory database)."""
        return self._db.path

    def _load_rules(self) -> Rules:
        return load_rules(self._db, self._recent, heads=self._db.schema_version >= HEADS_VERSION)

    def index_metadata(self, *keys: str) -> None:
        """Index these top-level metadata keys (names of letters, digits and ``_``), so
        ``list(filter={key: value})`` reads a page of matches, not every checkpoint, for
        text, int, bool or ``None`` values (others are filtered as before; the result is
        the same). Idempotent; the index stays and serves every later opening. The URL
        option ``?index_metadata=a,b`` calls this on opening (docs/sqlite.md).

        Raises:
            ConfigurationError: a key is not such a name.
            ReadOnlyError: the database is open read-only.
        """
        checked = metadata_index_keys(keys)
        self._writable("index_metadata")
        self._maintenance().index_metadata(checked)
        self._rules = self._load_rules()

    # -- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        """Close the database (after storing the async writes already queued).
        Idempotent; later calls raise StorageError."""
        self._group.close()
        self._db.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r})"

    # -- reading -----------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names, or the thread's newest in its namespace when it
        names none; ``None`` when there is no such checkpoint.

        Raises:
            CorruptCheckpointError: something it needs is damaged or missing (with
                ``on_corrupt="fallback"``, the newest is replaced by the newest intact
                checkpoint instead; one asked for by id never is).
        """
        thread_id, ns, checkpoint_id = location(config)
        where = Where(self.path, thread_id, ns, checkpoint_id)
        try:
            with self._db.transaction(write=False) as conn:
                if checkpoint_id is None:
                    row = newest(conn, (thread_id, ns), self._rules, where)
                else:
                    row = one(conn, (thread_id, ns, checkpoint_id), self._rules, where)
                if row is None:
                    return None
                raw = read_rest(conn, row, self._rules)
            return decode_raw(self.serde, raw, self.path, self._recent)
        except CorruptCheckpointError as exc:
            located = with_location(exc, where)
            if checkpoint_id is not None or self.on_corrupt != "fallback":
                if located is exc:
                    raise
                raise located from exc
            self._skip(located)
            scope: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
            return next(self._tuples(scope, quiet=located.checkpoint_id), None)

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
        streams without holding the database lock between items.

        A listing of whole threads (no ``filter``, ``before``, checkpoint id or
        ``limit`` cutting it short) ends by checking the head records, so a lost
        checkpoint row raises :class:`CorruptCheckpointError` after the last item.
        Damage raises when it is met (``on_corrupt="fallback"``: skipped, with a
        warning). A narrowed listing selects rows by their stored keys and metadata in
        SQL, so a row whose key or metadata was damaged may be left out of it; whole
        listings, ``get_tuple`` and :meth:`verify` find it.
        """
        if (limit := check_limit(limit)) is not None and limit <= 0:
            return
        whole = not filter and before is None and (list_scope(config)[2] is None)
        yield from self._tuples(config, filter=filter, before=before, limit=limit, whole=whole)

    def _tuples(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
        whole: bool = False,
        quiet: str | None = None,
    ) -> Iterator[CheckpointTuple]:
        """``list``; ``quiet``: a checkpoint id whose damage was reported already."""
        where, params = list_where(config, filter, before, self._rules.indexed)
        scope = (*list_scope(config), before_id(before))
        remaining = limit
        after: Cursor | None = None
        while True:
            want = _LIST_PAGE if filter or remaining is None else min(remaining, _LIST_PAGE)
            page, after, exhausted = self._list_page(where, params, filter, after, want, scope)
            for item in page:
                found = self._decoded(item, quiet)
                if found is None:
                    continue
                yield found
                if remaining is not None:
                    remaining -= 1
                    if remaining == 0:
                        return
            if exhausted:
                break
        if whole:
            with self._db.transaction(write=False) as conn:
                damage = scope_damage(conn, (scope[0], scope[1]), self._rules)
            for error in damage:
                self._damaged(error)

    def _decoded(
        self, item: Raw | CorruptCheckpointError, quiet: str | None
    ) -> CheckpointTuple | None:
        """A listed item decoded, or ``None`` for damage skipped (``on_corrupt``)."""
        try:
            if isinstance(item, CorruptCheckpointError):
                raise item
            return decode_raw(self.serde, item, self.path)
        except CorruptCheckpointError as exc:
            if exc.checkpoint_id is None or exc.checkpoint_id != quiet:
                self._damaged(exc)
            return None

    def _damaged(self, error: CorruptCheckpointError) -> None:
        if self.on_corrupt != "fallback":
            raise error
        self._skip(error)

    def _skip(self, error: CorruptCheckpointError) -> None:
        logger.warning("skipped damaged data (on_corrupt=fallback): %s", error)

    def _list_page(
        self,
        where: Sequence[str],
        params: Sequence[Any],
        filter: dict[str, Any] | None,
        after: Cursor | None,
        size: int,
        scope: tuple[str | None, ...],
    ) -> tuple[Page, Cursor | None, bool]:
        sql, args = page_query(where, params, after)
        with self._db.transaction(write=False) as conn:
            rows = [CheckpointRow._make(found) for found in conn.execute(sql, (*args, size))]
            page, last = read_page(conn, rows, self._rules, filter, (*scope, after))
        return page, last, len(rows) < size or last is None

    def _thread_heads(self, limit: int, after: Head | None) -> Heads:
        """A page of the ``heads`` table's root rows by the ``heads_threads`` index. A
        database older than the heads (open read-only, so not migrated) is scanned."""
        if not self._rules.heads:
            return super()._thread_heads(limit, after)
        sql, args = (THREAD_HEADS, ()) if after is None else (THREAD_HEADS_AFTER, after.rank)
        with self._db.transaction(write=False) as conn:
            rows = conn.execute(sql, (*args, limit)).fetchall()
        return [Head(str(thread_id), str(newest_id)) for thread_id, newest_id in rows]

    def get_writes(self, config: RunnableConfig) -> TaskWrites:
        thread_id, ns, checkpoint_id = location(config)
        if checkpoint_id is None:
            raise ConfigurationError("get_writes needs a checkpoint_id in the config")
        key = (thread_id, ns, checkpoint_id)
        where = Where(self.path, *key)
        try:
            with self._db.transaction(write=False) as conn:
                rows = conn.execute(SELECT_WRITES, key).fetchall()
                digest = conn.execute(SELECT_WRITES_DIGEST, key).fetchone()
                check_writes(key, rows, digest, where, legacy=self._rules.legacy)
        except CorruptCheckpointError as exc:
            raise with_location(exc, where) from exc
        return decode_writes(self.serde, rows)

    def _claim(self, thread_id: str) -> contextlib.AbstractContextManager[None]:
        self._db.check_open()  # a claim needs no query, but a closed checkpointer is closed
        return self._claims.claim(thread_id)  # a lock file beside the database

    def _claim_holder(self, thread_id: str) -> dict[str, Any] | None:
        return self._claims.holder(thread_id)

    # -- storing (checked and prepared by Checkpointer) ---------------------------------

    def _commit_put(self, prepared: PreparedPut) -> None:
        """Store a prepared checkpoint and its new values in one transaction, with its
        checksums, and count it in its namespace's head. The values are serialised (and
        append deltas planned) before it begins."""
        store = plan_put(self.serde, self._values, prepared)
        with self._db.transaction(write=True) as conn:
            finish = store(conn)
        finish()

    def _commit_writes(self, prepared: PreparedWrites) -> None:
        """Store prepared writes in one transaction (see :func:`._values.store_writes`)."""
        prepared = prepared.packed()
        with self._db.transaction(write=True) as conn:
            store_writes(prepared, conn)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._group.read(lambda: self.get_tuple(config))

    async def _acommit_put(self, prepared: PreparedPut) -> None:
        await self._group.write(functools.partial(plan_put, self.serde, self._values, prepared))

    async def _acommit_writes(self, prepared: PreparedWrites) -> None:
        await self._group.write(lambda: functools.partial(store_writes, prepared.packed()))

    def _maintenance(self) -> Maintenance:
        return Maintenance(self._db, self._rules, self.serde)

    def _delete_threads(self, thread_ids: Sequence[str]) -> None:
        self._maintenance().delete_threads(thread_ids)

    def _delete_runs(self, run_ids: Sequence[str]) -> None:
        self._maintenance().delete_runs(run_ids)

    def _copy_thread(self, source: str, target: str) -> None:
        self._maintenance().copy_thread(source, target)

    def _keep_latest(self, ids: Sequence[str]) -> None:
        self._maintenance().keep_latest(ids)

    # -- integrity -----------------------------------------------------------------------

    def verify(self, *, repair: bool = False) -> Damages:
        """Check every record of every thread — checkpoints, metadata, values and deltas
        (rebuilt and checked), pending writes and their digests, head records — and SQLite's
        own structures (``PRAGMA integrity_check``); return what is damaged (``[]``: all
        intact). Rows written before checksums existed are reported as unverified.

        ``repair=True`` (read-write only) checksums such rows (when they decode), and
        rebuilds head records and writes digests from the rows stored; it deletes and
        rewrites nothing else, and returns what it found (damage it could not repair
        stays, and reads keep raising on it).

        Raises:
            ReadOnlyError: ``repair`` on a read-only database.
        """
        if repair:
            self._writable("verify(repair=True)")
        found = self._maintenance().verify(repair=repair)
        if repair:
            self._rules = self._load_rules()
        return found

    def is_empty_database(self) -> bool:
        """Whether the database holds no table at all: a 0-byte file, which SQLite reads
        as an empty database, opened read-only (a read-write open creates the tables, as in
        a new file). Such a database stores nothing and is not damaged: :meth:`verify`
        finds nothing in it, as in a database with tables and no threads."""
        if self._db.schema_version:  # (tables were created or found)
            return False
        with self._db.transaction(write=False) as conn:
            return conn.execute("SELECT 1 FROM main.sqlite_master LIMIT 1").fetchone() is None

    # -- DeltaChannel support ------------------------------------------------------------

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Per channel: the writes on the target's ancestor path (oldest first, each
        checkpoint's in ``writes_sort_key`` order) back to the nearest ancestor holding a
        value, which is the ``seed``. Every row read is verified."""
        if not channels:
            return {}
        thread_id, ns, checkpoint_id = location(config)
        where = Where(self.path, thread_id, ns, checkpoint_id)
        try:
            with self._db.transaction(write=False) as conn:
                if checkpoint_id is None:
                    row = newest(conn, (thread_id, ns), self._rules, where)
                    checkpoint_id = row.checkpoint_id if row is not None else None
                if checkpoint_id is None:
                    return {ch: {"writes": []} for ch in channels}
                key = (thread_id, ns, checkpoint_id)
                return delta_history(conn, self.serde, key, channels, self._rules)
        except CorruptCheckpointError as exc:
            raise with_location(exc, where) from exc

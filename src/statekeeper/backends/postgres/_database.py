"""PostgreSQL plumbing shared by the checkpointer and the memory store.

One :class:`Database` owns a ``psycopg_pool`` connection pool (and an asyncio pool for each
event loop that uses the async API), creates and migrates its component's tables on open,
and runs operations. Each operation is written once, as a generator of statements
(:mod:`._running`); :meth:`Database.run` executes it on a pooled connection,
:meth:`Database.arun` on an asyncio one, and the checkpointer's small async calls are
batched onto the pool by :func:`._running.serve`, so the sync and the async API never
drift apart.

Connections are in autocommit mode: a single statement is its own transaction, and an
operation that needs several in one transaction yields ``Q(BEGIN)``... ``Q(COMMIT)``;
if it fails midway, the runner rolls back, so nothing is half-written.

Opening connects once, directly, before the pool exists, and hands that connection to the
pool: a server that refuses, an unknown database or role, a refused password or TLS setup
fail at once in one line (:func:`~statekeeper.backends.postgres.connect_error`), where
the pool would retry for ``pool_timeout`` and log every attempt. Once open, the pool
retries as before.

Lost connections: the pool checks a connection idle for a while before handing it out
(:class:`~statekeeper.backends.postgres.Freshness`; optional), and an operation that
failed because its connection broke (an ``OperationalError`` that
:func:`~._running.lost` says is one) drains the pool and is run again, from its start, on
a new connection (``retries`` times; every operation is idempotent except those run with
``retries=0``). One that still fails raises :class:`~statekeeper.errors.StorageError`
saying what to do; a write that failed was rolled back by the server (a transaction on a
dropped connection never commits). An error the server sent on a working connection is
never retried, nor called a lost connection (:meth:`Database.error`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
import psycopg.types.numeric
import psycopg_pool
from psycopg import sql
from psycopg_pool import ConnectionPool

from statekeeper.backends.postgres import (
    INDEX_ENTRY_BYTES,
    Connection,
    Freshness,
    LoopPool,
    connect_error,
    keep_open,
    release,
)
from statekeeper.backends.postgres._running import BEGIN, COMMIT, Op, Q, adrive, drive, lost
from statekeeper.errors import (
    InvalidIdError,
    ReadOnlyError,
    SchemaVersionError,
    StorageError,
    StorageNotFoundError,
)

__all__ = ["Database", "Migration", "lock_key"]

T = TypeVar("T")
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Migration:
    """One schema step: ``version`` is applied by running ``statements`` in order."""

    version: int
    description: str
    statements: tuple[str, ...]


# Every int goes as bigint: psycopg picks int2...numeric by value, which gave statements
# holding checksums a new signature at every call, so they were never prepared (_settings)
_ADAPTERS = psycopg.adapt.AdaptersMap(psycopg.adapters)
_ADAPTERS.register_dumper(int, psycopg.types.numeric.Int8Dumper)
_ADAPTERS.register_dumper(int, psycopg.types.numeric.Int8BinaryDumper)


def lock_key(*parts: str) -> int:
    """A signed 64-bit advisory lock key for ``parts`` (SHA-256 based)."""
    digest = hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class Database:
    """The tables of one component (``"checkpoints"``, ``"memory"``) in one schema.

    Guarantees: opening creates the schema and migrates it to the newest version
    idempotently, serialised between processes by a transaction-level advisory lock
    (waited for at most ``pool_timeout``, then StorageError); a schema written by a newer
    statekeeper is refused with :class:`~statekeeper.errors.SchemaVersionError`. Each
    event loop has an asyncio pool of its own, closed on that loop as the loop ends (so
    ``asyncio.run`` never waits for it). Read-only (``mode="ro"``): every connection has
    ``default_transaction_read_only=on``, nothing is created, and a missing schema raises
    :class:`~statekeeper.errors.StorageNotFoundError`."""

    def __init__(
        self, connection: Connection, *, component: str, migrations: Sequence[Migration]
    ) -> None:
        self.connection = connection
        self.component = component
        self.read_only = connection.read_only
        self._migrations = tuple(sorted(migrations, key=lambda m: m.version))
        self._closed = False
        self._lock = threading.Lock()
        self._apools: dict[asyncio.AbstractEventLoop, LoopPool] = {}  # one per event loop
        self._fresh = Freshness()
        self._kwargs: dict[str, Any] = {"autocommit": True, "context": _ADAPTERS}
        if connection.read_only:
            self._kwargs["options"] = "-c default_transaction_read_only=on"
        self._first: list[psycopg.Connection[Any]] = []  # made here, until the pool takes it
        try:
            self._first.append(self._connect_first())
            self._pool = ConnectionPool(
                connection.conninfo,
                connection_class=_handing_over(self._first),
                kwargs=self._conn_kwargs(),
                min_size=connection.pool_min_size,
                max_size=connection.pool_max_size,
                timeout=connection.pool_timeout,
                configure=self._configure,
                check=self._check if connection.pool_check else None,
                open=False,
                name=f"statekeeper-{component}",
            )
            self._pool.open(wait=False)
            self.run(lambda: self._migrate(), write=not self.read_only)
        except BaseException:
            self.close()
            raise

    def _conn_kwargs(self) -> dict[str, Any]:
        kwargs = dict(self._kwargs)
        if "options" in kwargs:
            # keep any libpq "options" the URL gave, adding ours
            given = psycopg.conninfo.conninfo_to_dict(self.connection.conninfo).get("options")
            if given:
                kwargs["options"] = f"{given} {kwargs['options']}"
        return kwargs

    def _connect_first(self) -> psycopg.Connection[Any]:
        """The first connection, made directly (waiting at most ``pool_timeout`` unless the
        URL sets ``connect_timeout``), the pool's first once it is open.

        Raises:
            StatekeeperError: it failed (:func:`connect_error`).
        """
        kwargs = self._conn_kwargs()
        if "connect_timeout" not in psycopg.conninfo.conninfo_to_dict(self.connection.conninfo):
            kwargs["connect_timeout"] = max(1, round(self.connection.pool_timeout))
        try:
            return psycopg.connect(self.connection.conninfo, **kwargs)
        except psycopg.Error as exc:
            raise connect_error(self.connection, exc) from exc

    def connect(self) -> psycopg.Connection[Any]:
        """A connection of its own, outside the pool (a claim holds one for its duration).

        Raises:
            StorageError: the server cannot be reached.
        """
        self._check_open()
        try:
            conn = psycopg.connect(self.connection.conninfo, **self._conn_kwargs())
            self._configure(conn)
        except psycopg.Error as exc:
            raise self.error(exc, False) from exc
        return conn

    def _settings(self) -> sql.Composed:
        # Prepared after a few runs (prepare_threshold), a statement's generic plan saves
        # planning the put at every call: several times its execution (lookups are by key).
        # A generic plan cannot see a LIMIT's value, so a listing's estimated cost passes
        # jit_above_cost, and compiling it took 11 ms where running it took 0.2: every
        # statement here reads or writes a few rows by key, which JIT never speeds up.
        return sql.SQL(
            "SET search_path TO {}; SET plan_cache_mode TO force_generic_plan; SET jit TO off"
        ).format(sql.Identifier(self.schema))

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute(self._settings())
        self._fresh.alive(conn)

    async def _aconfigure(self, conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.execute(self._settings())
        self._fresh.alive(conn)

    def _check(self, conn: psycopg.Connection[Any]) -> None:
        if self._fresh.needs_check(conn):
            ConnectionPool.check_connection(conn)

    async def _acheck(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if self._fresh.needs_check(conn):
            await psycopg_pool.AsyncConnectionPool.check_connection(conn)

    @property
    def schema(self) -> str:
        return self.connection.schema

    @property
    def display(self) -> str:
        return f"{self.connection.display} (schema {self.schema!r})"

    # -- migrations --------------------------------------------------------------------

    def _migrate(self) -> Op[None]:
        """Create the schema and bring the component's tables to the newest version, in
        one transaction holding an advisory lock (two processes opening at once take
        turns); read-only, only check the recorded version."""
        latest = self._migrations[-1].version if self._migrations else 0
        schema = sql.Identifier(self.schema)
        table = sql.SQL("{}.statekeeper_migrations").format(schema)
        if self.read_only:
            found = yield Q(
                "SELECT to_regclass(%s)", (f'"{self.schema}".statekeeper_migrations',), "one"
            )
            current = 0
            if found[0] is not None:
                current = yield from self._recorded(table)
            if current == 0:
                raise StorageNotFoundError(
                    f"no statekeeper {self.component} in {self.display}: nothing was ever "
                    "stored there (opened read-only, so nothing was created); check the "
                    "database and the schema option"
                )
            self._check_version(current, latest)
            if current < latest:
                raise SchemaVersionError(
                    f"the {self.component} schema in {self.display} is version {current}, "
                    f"older than this statekeeper's ({latest}); open it read-write once to "
                    "migrate it"
                )
            return
        yield BEGIN
        # One transaction: if a crash loses it, it runs again whole. Its lock waits (another
        # process migrating; DDL behind a long transaction, which queues every later use of
        # the table behind it) end after pool_timeout.
        ms = round(self.connection.pool_timeout * 1000)
        yield Q(f"SET LOCAL synchronous_commit = off; SET LOCAL lock_timeout = {ms}", fetch="count")
        yield Q("SELECT pg_advisory_xact_lock(%s)", (lock_key("statekeeper-migrate", self.schema),))
        yield Q(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema), fetch="count")
        yield Q(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (component text NOT NULL, version integer NOT NULL,"
                " description text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now(),"
                " PRIMARY KEY (component, version))"
            ).format(table),
            fetch="count",
        )
        current = yield from self._recorded(table)
        self._check_version(current, latest)
        for migration in self._migrations:
            if migration.version <= current:
                continue
            for statement in migration.statements:
                yield Q(statement, fetch="count")
            yield Q(
                sql.SQL(
                    "INSERT INTO {} (component, version, description) VALUES (%s, %s, %s)"
                ).format(table),
                (self.component, migration.version, migration.description),
                "count",
            )
        yield COMMIT

    def _recorded(self, table: sql.Composable) -> Op[int]:
        row = yield Q(
            sql.SQL("SELECT max(version) FROM {} WHERE component = %s").format(table),
            (self.component,),
            "one",
        )
        return int(row[0] or 0)

    def _check_version(self, current: int, latest: int) -> None:
        if current > latest:
            raise SchemaVersionError(
                f"the {self.component} schema in {self.display} is version {current}, "
                f"written by a newer statekeeper (this one understands up to version "
                f"{latest}); upgrade statekeeper to open it"
            )

    # -- running operations ------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise self.closed_error()

    def closed_error(self) -> StorageError:
        """What a call on the closed database raises."""
        return StorageError(
            f"the PostgreSQL {self.component} in {self.display} is closed; open a new "
            "checkpointer or store"
        )

    @contextlib.contextmanager
    def pooled(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection of the pool for the block. One that broke (``OperationalError``)
        drains the pool: the server may have dropped (or be dropping: termination is not
        instant) its other connections too, so all are replaced, those in use as they
        come back, and neither a retry nor the next call meets one."""
        self._check_open()
        try:
            with self._pool.connection() as conn:
                yield conn
                self._fresh.alive(conn)
        except psycopg.OperationalError as exc:
            if lost(exc):
                self._pool.drain()
            raise

    def run(
        self, make: Callable[[], Op[T]], *, write: bool = False, retries: int | None = None
    ) -> T:
        """Run the operation ``make()`` returns on a pooled connection (see the module
        docstring for transactions and retries; ``retries``: the connection's unless
        given, 0 for an operation that is not idempotent)."""
        self._check_open()
        if write and self.read_only:
            raise self.read_only_error()
        attempts = 1 + (self.connection.retries if retries is None else retries)
        for attempt in range(attempts):
            try:
                with self.pooled() as conn:
                    return drive(conn, make())
            except psycopg_pool.PoolTimeout as exc:
                raise self.error(exc, write) from exc
            except psycopg.OperationalError as exc:
                if lost(exc) and attempt + 1 < attempts:
                    logger.info("connection to %s lost; retrying: %s", self.display, exc)
                    continue
                raise self.error(exc, write) from exc
            except psycopg.Error as exc:
                raise self.error(exc, write) from exc
        raise AssertionError("unreachable")

    async def arun(
        self, make: Callable[[], Op[T]], *, write: bool = False, retries: int | None = None
    ) -> T:
        """:meth:`run` on the asyncio pool of the running event loop."""
        self._check_open()
        if write and self.read_only:
            raise self.read_only_error()
        pool = await self._async_pool()
        attempts = 1 + (self.connection.retries if retries is None else retries)
        for attempt in range(attempts):
            try:
                async with pool.connection() as conn:
                    result = await adrive(conn, make())
                    self._fresh.alive(conn)
                    return result
            except psycopg_pool.PoolTimeout as exc:
                raise self.error(exc, write) from exc
            except psycopg.OperationalError as exc:
                if lost(exc):
                    await pool.drain()  # as in pooled
                    if attempt + 1 < attempts:
                        logger.info("connection to %s lost; retrying: %s", self.display, exc)
                        continue
                raise self.error(exc, write) from exc
            except psycopg.Error as exc:
                raise self.error(exc, write) from exc
        raise AssertionError("unreachable")

    async def _async_pool(self) -> psycopg_pool.AsyncConnectionPool:
        """The running loop's asyncio pool, opened on first use (each loop has its own)."""
        loop = asyncio.get_running_loop()
        found = self._apools.get(loop)
        if found is not None and not found.pool.closed:
            return found.pool
        c = self.connection
        pool = psycopg_pool.AsyncConnectionPool(
            c.conninfo,
            kwargs=self._conn_kwargs(),
            min_size=c.pool_min_size,
            max_size=c.pool_max_size,
            timeout=c.pool_timeout,
            configure=self._aconfigure,
            check=self._acheck if c.pool_check else None,
            open=False,
            name=f"statekeeper-{self.component}-async",
        )
        await pool.open(wait=False)  # does not wait: no other task of this loop ran since
        made = LoopPool(loop, pool, loop.create_task(keep_open(pool), name=f"{pool.name}-keep"))
        with self._lock:
            # drop the pools whose loop ended, or that their loop's end closed already
            ended = [k for k in self._apools.values() if k.loop.is_closed() or k.pool.closed]
            for kept in ended:
                del self._apools[kept.loop]
            if not self._closed:
                self._apools[loop] = made
        for kept in ended if self._apools.get(loop) is made else [*ended, made]:
            release(kept)
        self._check_open()
        return pool

    def read_only_error(self) -> ReadOnlyError:
        return ReadOnlyError(
            f"cannot write to the PostgreSQL {self.component} in {self.display}: it is open "
            "read-only (mode=ro); open it read-write to change it"
        )

    def error(self, exc: Exception, write: bool) -> StorageError | InvalidIdError:
        """A driver error in one line saying what to do: a :class:`StorageError`, or an
        :class:`InvalidIdError` for a row the server cannot index (SQLSTATE class 54: ids
        or keys too long), which no retry stores."""
        if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
            return self.read_only_error()
        if isinstance(exc, psycopg_pool.PoolTimeout):
            return StorageError(
                f"cannot get a connection to PostgreSQL at {self.display} within "
                f"{self.connection.pool_timeout:g} s ({exc}); check that the server is up "
                "and reachable, or raise pool_max_size / pool_timeout"
            )
        if isinstance(exc, psycopg.errors.LockNotAvailable):
            return StorageError(
                f"timed out waiting for a lock in {self.display}: another session holds it (a"
                " process migrating the schema, a long transaction); retry, or see pg_locks"
            )
        said = _said(exc)
        undone = "the write was rolled back, nothing of it was stored; " if write else ""
        if isinstance(exc, psycopg.OperationalError) and lost(exc):
            return StorageError(
                f"lost the connection to PostgreSQL at {self.display}: {said}; {undone}"
                f"{'retry it' if write else 'retry'} once the server answers"
            )
        state = getattr(exc, "sqlstate", None) or ""
        if state.startswith("54"):  # program limit exceeded: an index row too large...
            return InvalidIdError(
                f"PostgreSQL at {self.display} cannot index this, it is too large: {said}; "
                f"{undone}the ids of one key must fit {INDEX_ENTRY_BYTES} bytes once "
                "compressed: use shorter ids or keys (retrying cannot succeed)"
            )
        if state.startswith("22"):  # data exception: a value the server refuses
            return StorageError(
                f"PostgreSQL at {self.display} refused a value: {said}; {undone}retrying "
                "the same value cannot succeed"
            )
        return StorageError(f"PostgreSQL error in {self.display}: {said}")

    def close(self) -> None:
        """Close the pools (asyncio ones on their loop). Idempotent; later use: StorageError."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            kept, self._apools = list(self._apools.values()), {}
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.close()
        for unused in self._first:  # opening failed before the pool took it
            unused.close()
        for each in kept:
            release(each)


def _said(exc: Exception) -> str:
    """What the server or libpq said, in one line (without DETAIL, HINT or CONTEXT)."""
    lines = str(exc).strip().splitlines()
    return lines[0].strip() if lines else type(exc).__name__


def _handing_over(first: list[psycopg.Connection[Any]]) -> type[psycopg.Connection[Any]]:
    """The pool's connection class: its ``connect`` hands over the connection in
    ``first`` (the one opening made) if it is still there, and connects otherwise. The
    pool starts with the connection that proved the server answers, so opening costs no
    connection more than the pool alone."""

    class HandingOver(psycopg.Connection[Any]):
        @classmethod
        def connect(cls, conninfo: str = "", **kwargs: Any) -> Any:
            try:
                return first.pop()  # atomic: two of the pool's workers never share it
            except IndexError:
                return super().connect(conninfo, **kwargs)

    return HandingOver

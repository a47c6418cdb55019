"""The savers the benchmarks compare, each opened fresh and closed after: LangGraph's own
(``InMemorySaver``, ``SqliteSaver``, ``PostgresSaver`` and their async twins) and
statekeeper's (SQLite, file, Redis, PostgreSQL), plus floors: the loopback floor, the
SQLite and file floors (``_floors.py``: what a durable write costs) and, for the async
fleet, two floors of scheduling (a yield and a thread hop per call).
``BACKENDS`` are the sync rows, ``ASYNC_BACKENDS`` the rows an ``ainvoke`` fleet runs on.

Redis is ``$REDIS_URL`` (default the local server; each row works under a fresh key
prefix and deletes its keys afterwards), PostgreSQL ``$POSTGRES_URL`` (default the local
server's ``postgres`` database; each row works in a schema of its own, dropped
afterwards).
"""

import asyncio
import functools
import os
import socket
import sqlite3
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
)
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from _floors import (
    PING,
    PONG,
    FileFloor,
    FlushedLog,
    ServedFloor,
    redis_round_trips,
    sqlite_commit,
)
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver


def redis_url() -> str:
    return os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


def postgres_url() -> str:
    return os.environ.get("POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


@dataclass
class Store:
    """An open saver, and how to measure its size once it has been closed."""

    saver: BaseCheckpointSaver[Any]
    size: Callable[[], int | None]  # None: not a storage row


def sqlite_file_bytes(path: Path) -> int:
    """Size of a closed SQLite database: main file + leftover WAL after a truncating checkpoint."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def in_memory_bytes(saver: Any) -> int:
    """Sum of every serialized value an ``InMemorySaver`` holds (typed tuples are (type, bytes))."""
    total = 0
    for namespaces in saver.storage.values():
        for checkpoints in namespaces.values():
            for checkpoint, metadata, _parent in checkpoints.values():
                total += len(checkpoint[1]) + len(metadata[1])
    for writes in saver.writes.values():
        for _task_id, _channel, value, _task_path in writes.values():
            total += len(value[1])
    for _type, blob in saver.blobs.values():
        total += len(blob)
    return total


def directory_bytes(path: Path) -> int:
    """The sum of the sizes of the files under ``path``."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@contextmanager
def open_in_memory(_path: Path) -> Iterator[Store]:
    saver = InMemorySaver()
    yield Store(saver, lambda: in_memory_bytes(saver))


@contextmanager
def open_langgraph_sqlite(path: Path) -> Iterator[Store]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        yield Store(SqliteSaver(conn), lambda: sqlite_file_bytes(path))
    finally:
        conn.close()


@contextmanager
def open_ours(path: Path) -> Iterator[Store]:
    from statekeeper.checkpointers import open_checkpointer

    with open_checkpointer(f"sqlite:///{path.resolve()}") as saver:
        yield Store(saver, lambda: sqlite_file_bytes(path))


@contextmanager
def open_ours_file(path: Path) -> Iterator[Store]:
    from statekeeper.checkpointers import open_checkpointer

    with open_checkpointer(f"file://{path.resolve()}") as saver:
        yield Store(saver, lambda: directory_bytes(path))


@contextmanager
def open_ours_file_unsynced(path: Path) -> Iterator[Store]:
    """The file checkpointer with ``fsync=false``: every write still lands in the page
    cache, none waits for the disk (the rest of its cost, without the flushes)."""
    from statekeeper.checkpointers import open_checkpointer

    with open_checkpointer(f"file://{path.resolve()}?fsync=false") as saver:
        yield Store(saver, lambda: directory_bytes(path))


@contextmanager
def open_ours_redis(_path: Path, **options: Any) -> Iterator[Store]:
    """On $REDIS_URL (default: the local server) under a fresh key prefix. Bytes: the sum
    of MEMORY USAGE of the prefix's keys when the saver closes; then the keys are deleted."""
    import redis

    from statekeeper.checkpointers import open_checkpointer

    url = redis_url()
    prefix = f"bench-{uuid.uuid4().hex}"
    client = redis.Redis.from_url(url)
    measured: list[int] = []
    try:
        with open_checkpointer(url, prefix=prefix, **options) as saver:
            yield Store(saver, lambda: measured[0])
            keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
            measured.append(sum(client.memory_usage(k, samples=0) or 0 for k in keys))
    finally:
        for key in client.scan_iter(match=f"{prefix}*", count=1000):
            client.unlink(key)
        client.close()


@contextmanager
def postgres_schema() -> Iterator[tuple[str, dict[str, Any]]]:
    """A fresh schema on $POSTGRES_URL, dropped afterwards: the URL, and the connection
    keywords LangGraph documents for its savers, with that schema as the search path."""
    from psycopg import Connection, sql
    from psycopg.rows import dict_row

    url = postgres_url()
    schema = f"bench_{uuid.uuid4().hex}"
    with Connection.connect(url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        try:
            yield (
                url,
                {
                    "autocommit": True,
                    "prepare_threshold": 0,
                    "row_factory": dict_row,
                    "options": f"-c search_path={schema}",
                },
            )
        finally:
            admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


POSTGRES_BYTES = (
    "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) AS size"
    " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE n.nspname = current_schema() AND c.relkind = 'r'"
)


@contextmanager
def open_langgraph_postgres(_path: Path) -> Iterator[Store]:
    """LangGraph's ``PostgresSaver`` on $POSTGRES_URL (default: the local server's
    ``postgres`` database), connected as LangGraph documents it, in a schema of its own
    that is dropped afterwards. Bytes: ``pg_total_relation_size`` of its tables (indexes
    and TOAST included) when the saver closes."""
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg import Connection

    measured: list[int] = []
    with postgres_schema() as (url, options), Connection.connect(url, **options) as conn:
        saver = PostgresSaver(conn)
        saver.setup()
        yield Store(saver, lambda: measured[0])
        row = conn.execute(POSTGRES_BYTES).fetchone()
        measured.append(int(row["size"]) if row else 0)


@contextmanager
def open_ours_postgres(_path: Path) -> Iterator[Store]:
    """statekeeper's ``PostgresCheckpointer`` on $POSTGRES_URL, in a schema of its own that
    is dropped afterwards. Bytes: as for ``PostgresSaver`` (its tables, indexes and TOAST,
    its migrations table included), measured when the saver closes."""
    from psycopg import Connection, sql

    from statekeeper.checkpointers import open_checkpointer

    url = postgres_url()
    schema = f"bench_{uuid.uuid4().hex}"
    measured: list[int] = []
    separator = "&" if "?" in url else "?"
    try:
        with open_checkpointer(f"{url}{separator}schema={schema}") as saver:
            yield Store(saver, lambda: measured[0])
        with Connection.connect(url, autocommit=True) as admin:
            size = POSTGRES_BYTES.replace("current_schema()", "%s")
            row = admin.execute(size, (schema,)).fetchone()
            measured.append(int(row[0]) if row else 0)
    finally:
        with Connection.connect(url, autocommit=True) as admin:
            drop = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
            admin.execute(drop)


class RoundTripFloor(InMemorySaver):
    """``InMemorySaver`` plus one bare ``PING`` round trip to Redis, over a raw socket, per
    ``get_tuple``, ``put`` and ``put_writes``: the cost of a networked saver's round trips
    alone, before any storage work or client library. Sockets are borrowed from a free
    list, since LangGraph calls ``put`` from its background threads."""

    request = PING  # what one round trip sends
    expected = PONG  # and the reply it waits for

    def __init__(self, url: str) -> None:
        super().__init__()
        parts = urlsplit(url)
        self._address = (parts.hostname or "127.0.0.1", parts.port or 6379)
        self._where = f"{self._address[0]}:{self._address[1]}"
        self._idle: list[socket.socket] = []
        self._lock = threading.Lock()

    def _round_trip(self) -> None:
        with self._lock:
            sock = self._idle.pop() if self._idle else None
        if sock is None:
            sock = socket.create_connection(self._address)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.sendall(self.request)
            reply = sock.recv(64)
        except OSError:
            sock.close()
            raise
        if not reply.startswith(self.expected):  # an AUTH-protected server says -NOAUTH
            sock.close()
            raise RuntimeError(f"Redis at {self._where} answered {reply!r}")
        with self._lock:
            self._idle.append(sock)

    def close(self) -> None:
        with self._lock:
            for sock in self._idle:
                sock.close()
            self._idle.clear()

    def get_tuple(self, config: Any) -> Any:
        self._round_trip()
        return super().get_tuple(config)

    def put(self, *args: Any, **kwargs: Any) -> Any:
        self._round_trip()
        return super().put(*args, **kwargs)

    def put_writes(self, *args: Any, **kwargs: Any) -> None:
        self._round_trip()
        super().put_writes(*args, **kwargs)


@contextmanager
def open_round_trip_floor(_path: Path) -> Iterator[Store]:
    """See :class:`RoundTripFloor`. It stores what ``InMemorySaver`` does, so its bytes are
    left out."""
    saver = RoundTripFloor(redis_url())
    try:
        yield Store(saver, lambda: None)
    finally:
        saver.close()


class CommitFloor(InMemorySaver):
    """``InMemorySaver`` plus one SQLite transaction per ``put`` and ``put_writes`` (an
    ``INSERT`` of the checkpoint or task id, then ``COMMIT``), on a database set up as
    statekeeper's (WAL, ``synchronous=NORMAL``): what a durable embedded write costs
    before any storage logic, the floor under statekeeper's SQLite row."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = NORMAL")
        self._conn.execute("CREATE TABLE log (id INTEGER PRIMARY KEY, what TEXT NOT NULL)")
        self._lock = threading.Lock()  # one connection; LangGraph writes from its threads

    def _commit(self, what: str) -> None:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.execute("INSERT INTO log (what) VALUES (?)", (what,))
            self._conn.execute("COMMIT")

    def close(self) -> None:
        self._conn.close()

    def put(self, config: Any, checkpoint: Any, *args: Any, **kwargs: Any) -> Any:
        self._commit(checkpoint["id"])
        return super().put(config, checkpoint, *args, **kwargs)

    def put_writes(self, config: Any, writes: Any, task_id: str, *args: Any, **kw: Any) -> None:
        self._commit(task_id)
        super().put_writes(config, writes, task_id, *args, **kw)


@contextmanager
def open_commit_floor(path: Path) -> Iterator[Store]:
    """See :class:`CommitFloor`; its bytes are left out (it stores what ``InMemorySaver``
    does, and a log of ids)."""
    saver = CommitFloor(path)
    try:
        yield Store(saver, lambda: None)
    finally:
        saver.close()


@contextmanager
def open_file_floor(path: Path) -> Iterator[Store]:
    """See :class:`~_floors.FileFloor`; its bytes are left out."""
    saver = FileFloor(path)
    try:
        yield Store(saver, lambda: None)
    finally:
        saver.log.close()


FLOORS = ("floor", "commit", "file-floor")  # rows that measure a floor, not a saver


@dataclass(frozen=True)
class Backend:
    key: str  # for --savers
    label: str  # for the table
    open: Callable[[Path], AbstractContextManager[Store]]
    langgraph: bool = False  # ratios are taken against LangGraph's savers


ON_REQUEST = ("file-nosync",)  # rows of BACKENDS run only when asked for
BACKENDS = [
    Backend("memory", "LangGraph InMemorySaver", open_in_memory, langgraph=True),
    Backend("sqlite", "LangGraph SqliteSaver", open_langgraph_sqlite, langgraph=True),
    Backend("postgres", "LangGraph PostgresSaver", open_langgraph_postgres, langgraph=True),
    Backend("floor", "loopback floor (InMemorySaver + 1 PING per call)", open_round_trip_floor),
    Backend("commit", "SQLite floor (InMemorySaver + 1 commit per write)", open_commit_floor),
    Backend("ours", "statekeeper SqliteCheckpointer", open_ours),
    Backend("file", "statekeeper FileCheckpointer", open_ours_file),
    Backend("file-nosync", "statekeeper FileCheckpointer (fsync=false)", open_ours_file_unsynced),
    Backend("file-floor", "file floor (InMemorySaver + 1 flushed line per write)", open_file_floor),
    Backend("redis", "statekeeper RedisCheckpointer", open_ours_redis),
    Backend("pg", "statekeeper PostgresCheckpointer", open_ours_postgres),
]


# -- async rows (an ``ainvoke`` fleet on one event loop) ----------------------------------


@asynccontextmanager
async def aopen_in_memory(_path: Path) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    yield InMemorySaver()


@asynccontextmanager
async def aopen_langgraph_sqlite(path: Path) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """LangGraph's ``AsyncSqliteSaver`` on one ``aiosqlite`` connection, as it documents."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
        yield saver


@asynccontextmanager
async def aopen_langgraph_postgres(_path: Path) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """LangGraph's ``AsyncPostgresSaver`` on one async connection, as it documents, in a
    schema of its own (see :func:`postgres_schema`)."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg import AsyncConnection

    with postgres_schema() as (url, options):
        async with await AsyncConnection.connect(url, **options) as conn:
            saver = AsyncPostgresSaver(conn)
            await saver.setup()
            yield saver


class YieldingFloor(InMemorySaver):
    """``InMemorySaver`` whose ``aget_tuple``, ``aput`` and ``aput_writes`` first yield to
    the event loop once (``await asyncio.sleep(0)``), as any saver that does I/O does:
    the scheduling part of an async saver's cost, with no storage work at all."""

    async def aget_tuple(self, config: Any) -> Any:
        await asyncio.sleep(0)
        return self.get_tuple(config)

    async def aput(self, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0)
        return self.put(*args, **kwargs)

    async def aput_writes(self, *args: Any, **kwargs: Any) -> None:
        await asyncio.sleep(0)
        self.put_writes(*args, **kwargs)


class ThreadHopFloor(InMemorySaver):
    """``InMemorySaver`` whose ``aget_tuple``, ``aput`` and ``aput_writes`` run its sync
    methods in a worker thread (``asyncio.to_thread``), as a saver on a blocking driver
    does: the thread hops alone."""

    async def aget_tuple(self, config: Any) -> Any:
        return await asyncio.to_thread(self.get_tuple, config)

    async def aput(self, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(self.put, *args, **kwargs)

    async def aput_writes(self, *args: Any, **kwargs: Any) -> None:
        await asyncio.to_thread(self.put_writes, *args, **kwargs)


class PostgresFloor(InMemorySaver):
    """``InMemorySaver`` plus, per call, one statement on a connection of psycopg's
    asyncio pool (as statekeeper's PostgreSQL checkpointer uses it): ``SELECT 1`` for
    ``aget_tuple``, a one-row ``INSERT`` (a commit) for ``aput`` and ``aput_writes``. What
    a PostgreSQL saver costs with one round trip per call, before any storage work."""

    def __init__(self, pool: Any) -> None:
        super().__init__()
        self._pool = pool

    async def _statement(self, query: str) -> None:
        async with self._pool.connection() as conn:
            await conn.execute(query)

    async def aget_tuple(self, config: Any) -> Any:
        await self._statement("SELECT 1")
        return self.get_tuple(config)

    async def aput(self, *args: Any, **kwargs: Any) -> Any:
        await self._statement("INSERT INTO floor_writes VALUES (1)")
        return self.put(*args, **kwargs)

    async def aput_writes(self, *args: Any, **kwargs: Any) -> None:
        await self._statement("INSERT INTO floor_writes VALUES (1)")
        self.put_writes(*args, **kwargs)


@asynccontextmanager
async def aopen_postgres_floor(_path: Path) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """:class:`PostgresFloor` in a schema of its own, on a pool of statekeeper's default
    size (10)."""
    from psycopg_pool import AsyncConnectionPool

    with postgres_schema() as (url, options):
        kwargs = {"autocommit": True, "options": options["options"]}
        async with AsyncConnectionPool(url, kwargs=kwargs, max_size=10, open=False) as pool:
            async with pool.connection() as conn:
                await conn.execute("CREATE TABLE floor_writes (n integer)")
            yield PostgresFloor(pool)


@asynccontextmanager
async def aopen_commit_floor(path: Path) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """:class:`~_floors.ServedFloor` committing each batch's writes in one SQLite
    transaction (:func:`~_floors.sqlite_commit`)."""
    commit, close = sqlite_commit(path)
    saver = ServedFloor(commit)
    try:
        yield saver
    finally:
        saver.close()
        close()


@asynccontextmanager
async def aopen_file_floor(path: Path) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """:class:`~_floors.ServedFloor` flushing one line per write (:class:`~_floors.FlushedLog`)."""
    log = FlushedLog(path)
    saver = ServedFloor(log.append_each)
    try:
        yield saver
    finally:
        saver.close()
        log.close()


@asynccontextmanager
async def aopen_redis_floor(_path: Path) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """:class:`~_floors.ServedFloor` making one ``PING`` round trip per call
    (:func:`~_floors.redis_round_trips`) to $REDIS_URL."""
    round_trips, close = redis_round_trips(redis_url())
    saver = ServedFloor(round_trips)
    try:
        yield saver
    finally:
        saver.close()
        close()


def _plain(cls: type[InMemorySaver]) -> Callable[[Path], Any]:
    @asynccontextmanager
    async def aopen(_path: Path) -> AsyncIterator[BaseCheckpointSaver[Any]]:
        yield cls()

    return aopen


def _sync_to_async(
    open_sync: Callable[[Path], AbstractContextManager[Store]],
) -> Callable[[Path], AbstractAsyncContextManager[BaseCheckpointSaver[Any]]]:
    """statekeeper's savers are opened the same way for sync and async use."""

    @asynccontextmanager
    async def aopen(path: Path) -> AsyncIterator[BaseCheckpointSaver[Any]]:
        with open_sync(path) as store:
            yield store.saver

    return aopen


@dataclass(frozen=True)
class AsyncBackend:
    key: str  # for --savers
    label: str  # for the table
    open: Callable[[Path], AbstractAsyncContextManager[BaseCheckpointSaver[Any]]]
    langgraph: bool = False  # ratios are taken against LangGraph's savers


ASYNC_BACKENDS = [
    AsyncBackend("memory", "LangGraph InMemorySaver", aopen_in_memory, langgraph=True),
    AsyncBackend("sqlite", "LangGraph AsyncSqliteSaver", aopen_langgraph_sqlite, langgraph=True),
    AsyncBackend(
        "postgres", "LangGraph AsyncPostgresSaver", aopen_langgraph_postgres, langgraph=True
    ),
    AsyncBackend(
        "yield", "floor: InMemorySaver + 1 await sleep(0) per call", _plain(YieldingFloor)
    ),
    AsyncBackend(
        "hop", "floor: InMemorySaver, each call in a worker thread", _plain(ThreadHopFloor)
    ),
    AsyncBackend(
        "pg-floor",
        "floor: InMemorySaver + 1 PostgreSQL statement per call (a commit per write)",
        aopen_postgres_floor,
    ),
    AsyncBackend(
        "commit",
        "floor: InMemorySaver served in batches + 1 SQLite commit per batch",
        aopen_commit_floor,
    ),
    AsyncBackend(
        "file-floor",
        "floor: InMemorySaver served in batches + 1 flushed line per write",
        aopen_file_floor,
    ),
    AsyncBackend(
        "redis-floor",
        "floor: InMemorySaver served in batches + 1 PING per call",
        aopen_redis_floor,
    ),
    AsyncBackend("ours", "statekeeper SqliteCheckpointer", _sync_to_async(open_ours)),
    AsyncBackend("file", "statekeeper FileCheckpointer", _sync_to_async(open_ours_file)),
    AsyncBackend(
        "file-nosync",
        "statekeeper FileCheckpointer (fsync=false)",
        _sync_to_async(open_ours_file_unsynced),
    ),
    AsyncBackend("redis", "statekeeper RedisCheckpointer", _sync_to_async(open_ours_redis)),
    AsyncBackend("pg", "statekeeper PostgresCheckpointer", _sync_to_async(open_ours_postgres)),
    AsyncBackend(
        "redis-asyncio",
        "statekeeper RedisCheckpointer, async_io=asyncio",
        _sync_to_async(functools.partial(open_ours_redis, async_io="asyncio")),
    ),
]


def postgres_unreachable() -> str | None:
    """Why $POSTGRES_URL's server cannot be used (``None``: it answers)."""
    parts = urlsplit(postgres_url())
    where = f"{parts.hostname or '127.0.0.1'}:{parts.port or 5432}"
    try:
        socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5432), 2).close()
    except OSError as exc:
        return f"no PostgreSQL answers at {where} ({exc.strerror or exc})"
    return None

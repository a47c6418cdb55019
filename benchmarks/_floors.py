"""Floors under the durable savers: ``InMemorySaver`` plus only what making a write
durable costs, with no storage logic (see ``_savers.py`` for the rows that open them).

* :class:`FileFloor` (sync): one line appended to a log and flushed (``fdatasync``) per
  ``put`` and ``put_writes``, as the file checkpointer flushes each write.
* :class:`ServedFloor` (async): the async calls served the way statekeeper's SQLite and
  file checkpointers serve theirs, queued for one thread
  (:class:`~statekeeper._storage.worker.BatchWorker`) that runs each batch, then makes
  its writes durable: :func:`sqlite_commit` (one transaction per batch, one ``INSERT``
  per write, as the SQLite checkpointer's group commit), :class:`FlushedLog` (one
  flushed line per write: a thread's log is a file of its own, so one flush cannot
  commit two threads' writes) or :func:`redis_round_trips` (one bare ``PING`` per call,
  as the Redis checkpointer runs one script per call).

Each stores what ``InMemorySaver`` does (the logs hold only ids), so no bytes are measured.
"""

import functools
import os
import socket
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from langgraph.checkpoint.memory import InMemorySaver

__all__ = [
    "PING",
    "PONG",
    "FileFloor",
    "FlushedLog",
    "ServedFloor",
    "redis_round_trips",
    "sqlite_commit",
]

PING, PONG = b"*1\r\n$4\r\nPING\r\n", b"+PONG"  # one bare Redis round trip, and its reply

# What a served batch hands to its ``durable``: the id of each call's write (the
# checkpoint or task id), ``None`` for a read, in the order the calls ran.
Calls = Sequence[str | None]


class FlushedLog:
    """A file that each :meth:`append` adds one line to and flushes (``fdatasync``)."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()  # LangGraph writes from its background threads

    def append(self, what: str) -> None:
        with self._lock:
            os.write(self._fd, f"{what}\n".encode())
            os.fdatasync(self._fd)

    def append_each(self, calls: Calls) -> None:
        for what in calls:
            if what is not None:
                self.append(what)

    def close(self) -> None:
        os.close(self._fd)


class FileFloor(InMemorySaver):
    """``InMemorySaver`` plus one flushed line (the checkpoint or task id) per ``put`` and
    ``put_writes``: the floor under the file checkpointer (whose default flushes every
    write), before its logs, heads, checksums and thread index."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.log = FlushedLog(path)

    def put(self, config: Any, checkpoint: Any, *args: Any, **kwargs: Any) -> Any:
        self.log.append(checkpoint["id"])
        return super().put(config, checkpoint, *args, **kwargs)

    def put_writes(self, config: Any, writes: Any, task_id: str, *args: Any, **kw: Any) -> None:
        self.log.append(task_id)
        super().put_writes(config, writes, task_id, *args, **kw)


def sqlite_commit(path: Path) -> tuple[Callable[[Calls], None], Callable[[], None]]:
    """A durable write of a batch as statekeeper's SQLite makes it (WAL,
    ``synchronous=NORMAL``, one ``BEGIN IMMEDIATE`` ... ``COMMIT`` per batch, one row per
    write), and how to close the database. Used from the serving thread only."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("CREATE TABLE log (id INTEGER PRIMARY KEY, what TEXT NOT NULL)")

    def commit(calls: Calls) -> None:
        rows = [(what,) for what in calls if what is not None]
        if rows:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("INSERT INTO log (what) VALUES (?)", rows)
            conn.execute("COMMIT")

    return commit, conn.close


def redis_round_trips(url: str) -> tuple[Callable[[Calls], None], Callable[[], None]]:
    """One bare ``PING`` round trip to Redis at ``url`` per call of a batch, over one raw
    socket (the serving thread's), and how to close it."""
    parts = urlsplit(url)
    address = (parts.hostname or "127.0.0.1", parts.port or 6379)
    sock = socket.create_connection(address)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def round_trips(calls: Calls) -> None:
        for _ in calls:
            sock.sendall(PING)
            reply = sock.recv(64)
            if not reply.startswith(PONG):  # an AUTH-protected server says -NOAUTH
                raise RuntimeError(f"Redis at {address[0]}:{address[1]} answered {reply!r}")

    return round_trips, sock.close


class ServedFloor(InMemorySaver):
    """``InMemorySaver`` whose ``aget_tuple``, ``aput`` and ``aput_writes`` queue for one
    serving thread, which runs every call waiting, then ``durable`` once for the batch
    (see :data:`Calls`), before any caller resumes: statekeeper's way of serving an async
    fleet, with no storage logic."""

    def __init__(self, durable: Callable[[Calls], None]) -> None:
        from statekeeper._storage.worker import BatchWorker  # not imported by other rows

        super().__init__()
        self._durable = durable
        self._worker = BatchWorker("floor", self._serve, lambda: RuntimeError("closed"))

    def _serve(self, batch: list[Any]) -> None:
        served: list[str | None] = []
        for job in batch:
            call, what = job.task
            try:
                job.result = call()
            except BaseException as exc:  # the caller's to raise
                job.error = exc
            else:
                served.append(what)
        self._durable(served)

    def close(self) -> None:
        self._worker.close()

    async def aget_tuple(self, config: Any) -> Any:
        return await self._worker.submit((functools.partial(self.get_tuple, config), None))

    async def aput(self, config: Any, checkpoint: Any, *args: Any, **kwargs: Any) -> Any:
        call = functools.partial(self.put, config, checkpoint, *args, **kwargs)
        return await self._worker.submit((call, checkpoint["id"]))

    async def aput_writes(self, config: Any, writes: Any, task_id: str, *args: Any) -> None:
        call = functools.partial(self.put_writes, config, writes, task_id, *args)
        await self._worker.submit((call, task_id))

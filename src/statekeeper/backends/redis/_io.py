"""Sans-IO execution of Redis operations, with the synchronous or the asyncio client.

A component writes each operation once, as a generator that yields :class:`Cmd`,
:class:`Eval` and :class:`Batch` requests (and :class:`Emit` for the items of a stream)
and receives their replies; a request that fails raises its
:class:`~statekeeper.errors.StorageError` inside the generator, at the ``yield``, so an
operation may handle it (the Redis checkpointer's open tells a replica that way).
:class:`Connection` runs such a generator with the synchronous client
(:meth:`~Connection.run`, :meth:`~Connection.iterate`) or with the asyncio client of the
running event loop (:meth:`~Connection.arun`, :meth:`~Connection.aiterate`): only the
I/O differs, never the logic. Driver errors leave as
:class:`~statekeeper.errors.StorageError` (see :meth:`RedisTarget.error`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import threading
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import redis.exceptions

from statekeeper.backends.redis._client import (
    ASYNC_CONNECTIONS,
    DRIVER_ERRORS,
    RedisTarget,
    asend,
    send,
)
from statekeeper.backends.redis._client import packed as _packed
from statekeeper.errors import StorageError

__all__ = ["Batch", "Call", "Cmd", "Connection", "Emit", "Eval", "Op", "Script", "Stream"]

T = TypeVar("T")

# -- requests ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Script:
    """A Lua script, run with ``EVALSHA`` (``EVAL`` when the server does not have it yet)."""

    source: str
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.source.encode()).hexdigest())  # noqa: S324


@dataclass(frozen=True, slots=True)
class Cmd:
    """One Redis command; the reply is what redis-py returns for it."""

    args: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Eval:
    """One script call. All ``keys`` must share a hash tag (one Cluster slot)."""

    script: Script
    keys: tuple[bytes, ...]
    args: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Batch:
    """Independent, idempotent requests sent together (pipelined where the client allows;
    a Cluster client runs the scripts among them one by one); the reply is the list of
    their replies. Not a transaction."""

    calls: tuple[Cmd | Eval, ...]


@dataclass(frozen=True, slots=True)
class Emit:
    """An item a stream hands to its consumer (the reply sent back is ``None``)."""

    value: Any


Call = Cmd | Eval | Batch
Op = Generator[Call, Any, T]
Stream = Generator[Call | Emit, Any, None]


def _command(call: Cmd | Eval, *, sha: bool = True) -> tuple[Any, ...]:
    if isinstance(call, Cmd):
        return call.args
    head = ("EVALSHA", call.script.sha) if sha else ("EVAL", call.script.source)
    return (*head, len(call.keys), *call.keys, *call.args)


def _no_script(reply: Any) -> bool:
    return isinstance(reply, redis.exceptions.NoScriptError)


@dataclass(eq=False)
class _LoopClient:
    """An event loop's asyncio client, the keeper that closes it, and the gate that lets
    ``ASYNC_CONNECTIONS`` requests be under way at once; ``ready`` is set once the client
    is ready to use or ``failed`` to be."""

    client: Any
    keeper: AsyncGenerator[None, None]
    gate: asyncio.Semaphore
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    failed: BaseException | None = None
    idle: list[Any] = field(default_factory=list)  # a standalone client's script connections


class Connection:
    """The clients of one :class:`RedisTarget`: synchronous ones for any thread (on a
    standalone server a free list of single-connection clients, each used by one thread at
    a time; a forked child starts its own), and one asyncio client per event loop
    (asyncio connections belong to the loop that opened them). Runs sans-IO operations;
    see the module docstring.

    After :meth:`close` every call raises :class:`~statekeeper.errors.StorageError`.
    """

    def __init__(self, target: RedisTarget) -> None:
        self.target = target
        self._lock = threading.Lock()
        self._closed = False
        self._closing: set[AsyncGenerator[None, None]] = set()
        self._aclients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopClient] = (
            weakref.WeakKeyDictionary()
        )
        # On a standalone server, commands borrow a single-connection client from a free
        # list: redis-py's pool checks every connection it hands out with an extra
        # non-blocking read, which costs a GIL hand-off per command in LangGraph's
        # background threads. A client that saw an unexpected error is not reused.
        self._idle: list[Any] = []
        self._borrowed: weakref.WeakSet[Any] = weakref.WeakSet()
        self._pid = os.getpid()
        try:
            self._client = target.sync_client()
        except DRIVER_ERRORS as exc:
            raise target.error(exc) from exc

    # -- synchronous --------------------------------------------------------------------

    def run(self, op: Op[T]) -> T:
        """Run ``op`` to completion with the synchronous client; return its result."""
        reply: Any = None
        failed: StorageError | None = None
        while True:
            try:
                call = op.send(reply) if failed is None else op.throw(failed)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            reply, failed = self._attempt(call)

    def iterate(self, stream: Stream) -> Iterator[Any]:
        """Run ``stream`` with the synchronous client, yielding what it emits, lazily."""
        reply: Any = None
        failed: StorageError | None = None
        while True:
            try:
                call = stream.send(reply) if failed is None else stream.throw(failed)
            except StopIteration:
                return
            if isinstance(call, Emit):
                reply, failed = None, None
                yield call.value
            else:
                reply, failed = self._attempt(call)

    def _attempt(self, call: Call) -> tuple[Any, StorageError | None]:
        """``call``'s reply, or the StorageError it failed with (for the operation)."""
        try:
            return self._execute(call), None
        except StorageError as exc:
            return None, exc

    def _execute(self, call: Call) -> Any:
        if self.target.cluster:
            return self._execute_with(self._live(self._client), call)
        self._live(None)
        try:
            client = self._borrow()  # connects a new client right away
        except DRIVER_ERRORS as exc:
            raise self.target.error(exc) from exc
        try:
            reply = self._execute_with(self._live(client), call)
        except (StorageError, redis.exceptions.ResponseError):
            self._give_back(client)  # the connection is in a known state
            raise
        except BaseException:
            client.close()
            raise
        self._give_back(client)
        return reply

    def _execute_with(self, client: Any, call: Call) -> Any:
        try:
            if isinstance(call, Batch):
                if self.target.cluster and any(isinstance(c, Eval) for c in call.calls):
                    return [self._single(client, c) for c in call.calls]
                replies = self._pipeline(client, call)
                if any(map(_no_script, replies)):  # load the scripts, then send it again
                    for c in call.calls:
                        if isinstance(c, Eval):
                            client.execute_command("SCRIPT", "LOAD", c.script.source)
                    replies = self._pipeline(client, call)
                return _raise_first(replies)
            if isinstance(call, Eval) and not self.target.cluster:
                return send(
                    client.connection,
                    _packed(_command(call)),
                    lambda: _packed(_command(call, sha=False)),
                )
            return self._single(client, call)
        except DRIVER_ERRORS as exc:
            raise self.target.error(exc) from exc

    @staticmethod
    def _single(client: Any, call: Cmd | Eval) -> Any:
        try:
            return client.execute_command(*_command(call))
        except redis.exceptions.NoScriptError:
            return client.execute_command(*_command(call, sha=False))

    @staticmethod
    def _pipeline(client: Any, batch: Batch) -> list[Any]:
        pipe = client.pipeline(transaction=False)
        for c in batch.calls:
            pipe.execute_command(*_command(c))
        return pipe.execute(raise_on_error=False)  # type: ignore[no-any-return]

    def _borrow(self) -> Any:
        with self._lock:
            if self._pid != os.getpid():  # forked: the parent's sockets are not ours
                self._idle, self._pid = [], os.getpid()
            if self._idle:
                return self._idle.pop()
        client = self.target.sync_client(single_connection=True)
        self._borrowed.add(client)
        return client

    def _give_back(self, client: Any) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append(client)
                return
        client.close()

    # -- asyncio ------------------------------------------------------------------------

    async def arun(self, op: Op[T]) -> T:
        """Run ``op`` to completion with the running loop's asyncio client."""
        reply: Any = None
        failed: StorageError | None = None
        while True:
            try:
                call = op.send(reply) if failed is None else op.throw(failed)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            reply, failed = await self._aattempt(call)

    async def aiterate(self, stream: Stream) -> AsyncIterator[Any]:
        """Run ``stream`` with the running loop's asyncio client, yielding what it emits."""
        reply: Any = None
        failed: StorageError | None = None
        while True:
            try:
                call = stream.send(reply) if failed is None else stream.throw(failed)
            except StopIteration:
                return
            if isinstance(call, Emit):
                reply, failed = None, None
                yield call.value
            else:
                reply, failed = await self._aattempt(call)

    async def _aattempt(self, call: Call) -> tuple[Any, StorageError | None]:
        try:
            return await self._aexecute(call), None
        except StorageError as exc:
            return None, exc

    async def _aexecute(self, call: Call) -> Any:
        try:
            entry = await self._async_client()
        except DRIVER_ERRORS as exc:
            raise self.target.error(exc) from exc
        self._live(entry)
        assert entry is not None
        try:
            async with asyncio.timeout(self.target.socket_timeout):
                await entry.gate.acquire()
        except TimeoutError:
            raise StorageError(
                f"no free connection to Redis at {self.target.url} within "
                f"{self.target.socket_timeout} s ({ASYNC_CONNECTIONS} requests under way); "
                "raise socket_timeout, or make fewer calls at once"
            ) from None
        try:
            if isinstance(call, Eval) and not self.target.cluster:
                return await self._ascript(entry, call)
            return await self._aexecute_with(entry.client, call)  # replies parsed by redis-py
        finally:
            entry.gate.release()

    async def _ascript(self, entry: _LoopClient, call: Eval) -> Any:
        """One script call on a standalone server, on a connection of the loop's own (one
        of at most ``ASYNC_CONNECTIONS``: the gate is held), as the sync path sends it."""
        conn = entry.idle.pop() if entry.idle else entry.client.connection_pool.make_connection()
        try:
            reply = await asend(
                conn, _packed(_command(call)), lambda: _packed(_command(call, sha=False))
            )
        except redis.exceptions.ResponseError:
            entry.idle.append(conn)  # the connection is in a known state
            raise
        except DRIVER_ERRORS as exc:
            await conn.disconnect(nowait=True)
            raise self.target.error(exc) from exc
        except BaseException:  # cancelled mid-reply, say: the connection is not reused
            await conn.disconnect(nowait=True)
            raise
        entry.idle.append(conn)
        return reply

    async def _aexecute_with(self, client: Any, call: Call) -> Any:
        try:
            if isinstance(call, Batch):
                if self.target.cluster and any(isinstance(c, Eval) for c in call.calls):
                    return [await self._asingle(client, c) for c in call.calls]
                replies = await self._apipeline(client, call)
                if any(map(_no_script, replies)):
                    for c in call.calls:
                        if isinstance(c, Eval):
                            await client.execute_command("SCRIPT", "LOAD", c.script.source)
                    replies = await self._apipeline(client, call)
                return _raise_first(replies)
            return await self._asingle(client, call)
        except DRIVER_ERRORS as exc:
            raise self.target.error(exc) from exc

    @staticmethod
    async def _asingle(client: Any, call: Cmd | Eval) -> Any:
        try:
            return await client.execute_command(*_command(call))
        except redis.exceptions.NoScriptError:
            return await client.execute_command(*_command(call, sha=False))

    @staticmethod
    async def _apipeline(client: Any, batch: Batch) -> list[Any]:
        pipe = client.pipeline(transaction=False)
        for c in batch.calls:
            pipe.execute_command(*_command(c))
        return await pipe.execute(raise_on_error=False)  # type: ignore[no-any-return]

    async def _async_client(self) -> _LoopClient | None:
        """The running loop's asyncio client (``None`` once closed) and its gate (see
        :meth:`RedisTarget.async_client`).

        The first call on a loop makes the client and readies it (a Cluster client reads
        its slot map) while later callers wait: redis-py's Cluster client, used by many
        tasks before it has its slot map, reads it once per task and closes connections
        the others are still opening."""
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._aclients.get(loop)
            mine = entry is None and not self._closed
            if mine:
                client = self.target.async_client()
                gate = asyncio.Semaphore(ASYNC_CONNECTIONS)
                entry = _LoopClient(client, None, gate)  # type: ignore[arg-type]
                entry.keeper = _keeper(entry)
                self._aclients[loop] = entry
        if entry is None:
            return None
        if mine:
            try:
                await entry.keeper.asend(None)  # now the loop closes it when it shuts down
                if self.target.cluster:
                    await entry.client.initialize()
            except BaseException as exc:
                entry.failed = exc
                with self._lock:
                    if self._aclients.get(loop) is entry:
                        del self._aclients[loop]  # the next call starts again
                with contextlib.suppress(*DRIVER_ERRORS):
                    await entry.keeper.aclose()
                raise
            finally:
                entry.ready.set()
        elif not entry.ready.is_set():
            await entry.ready.wait()
        if entry.failed is not None:
            raise StorageError(f"cannot reach Redis at {self.target.url}") from entry.failed
        return entry

    # -- lifecycle ------------------------------------------------------------------------

    def _live(self, client: Any) -> Any:
        if self._closed:
            raise self.closed_error()
        return client

    def closed_error(self) -> StorageError:
        """What a call after :meth:`close` raises."""
        return StorageError(f"the Redis checkpointer for {self.target.url} is closed")

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Disconnect every client. Idempotent.

        An asyncio client is closed on its own loop: now if that loop is idle; if it is the
        running loop, its sockets now and the client when the loop shuts down its async
        generators (as ``asyncio.run`` does); a loop that shut down already closed it."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            aclients = list(self._aclients.items())
            self._aclients.clear()
        self._client.close()
        for client in list(self._borrowed):
            client.close()
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for loop, entry in aclients:
            keeper = entry.keeper
            if loop.is_closed():
                continue
            if loop is running:
                # Awaiting is impossible here, and a task could be cancelled halfway by the
                # loop's shutdown: close the sockets now, and the client when the loop shuts
                # down its async generators (or collects the keeper).
                _drop_connections(entry)
                self._closing.add(keeper)
            elif loop.is_running():
                asyncio.run_coroutine_threadsafe(keeper.aclose(), loop)
            else:
                loop.run_until_complete(keeper.aclose())

    async def aclose(self) -> None:
        """Close the running loop's asyncio client (awaiting it), then everything else."""
        with self._lock:
            entry = self._aclients.pop(asyncio.get_running_loop(), None)
        if entry is not None:
            await entry.keeper.aclose()
        self.close()


def _drop_connections(entry: _LoopClient) -> None:
    """Close an asyncio client's sockets without awaiting, as redis-py's own finalizers
    do (best effort: these are redis-py internals)."""
    client = entry.client
    try:
        if hasattr(client, "connection_pool"):
            pool = client.connection_pool
            connections = [*pool._available_connections, *pool._in_use_connections]
        else:
            manager = client.nodes_manager
            nodes = [*manager.nodes_cache.values(), *manager.startup_nodes.values()]
            connections = [c for node in nodes for c in node._connections]
        for connection in [*connections, *entry.idle]:
            connection._close()
    except (AttributeError, RuntimeError):
        pass


async def _keeper(entry: _LoopClient) -> AsyncGenerator[None, None]:
    """Suspended for the life of a loop's asyncio client: closing it (or the loop's
    shutdown of its async generators) closes the client and its script connections on
    its loop."""
    try:
        yield
    finally:
        for conn in entry.idle:
            await conn.disconnect()
        await entry.client.aclose()


def _raise_first(replies: list[Any]) -> list[Any]:
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies

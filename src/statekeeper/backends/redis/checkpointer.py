"""``RedisCheckpointer``: checkpoints in Redis (or Valkey), standalone or Cluster.

Plain Redis 6.2+ or Valkey with no modules: sorted sets, hashes and Lua scripts only.
Every key of a thread carries the thread's hash tag, so each write is one script on one
node (atomic, also in a Cluster), and per-thread reads are O(log n + limit). The layout is
documented in ``docs/redis.md`` and :mod:`statekeeper.backends.redis._lua`.

One class serves both APIs: the sync methods use redis-py's synchronous client (shared
by threads), the async methods the same in worker threads or, with
``async_io="asyncio"``, its asyncio client (one per event loop); all run the same
operation code (:mod:`statekeeper.backends.redis._reads` and
:mod:`statekeeper.backends.redis._writes`, over :mod:`statekeeper.backends.redis._io`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import os
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from types import NoneType, TracebackType
from typing import Any, Self, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, DeltaChannelHistory
from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper._storage.payload import safe_serde
from statekeeper._storage.worker import BatchWorker, run_each
from statekeeper.backends.redis import _lua as lua
from statekeeper.backends.redis._claims import Claims
from statekeeper.backends.redis._client import (
    ASYNC_IO,
    RedisCheckpointerOptions,
    RedisOptions,
    RedisTarget,
)
from statekeeper.backends.redis._integrity.seal import damaged_reply, wrong_type
from statekeeper.backends.redis._integrity.verify import Verify
from statekeeper.backends.redis._io import Cmd, Connection, Op
from statekeeper.backends.redis._writes import Plans
from statekeeper.checkpointers.base import Checkpointer, TaskWrite
from statekeeper.checkpointers.heads import Head
from statekeeper.checkpointers.records import PreparedPut, PreparedWrites
from statekeeper.checkpointers.semantics import (
    MODES,
    ON_CORRUPT,
    check_choice,
    check_limit,
    metadata_index_keys,
)
from statekeeper.errors import ConfigurationError, Damage, StorageError
from statekeeper.urls import OptionKind, StorageURL, check_option, parse_options

__all__ = ["RedisCheckpointer"]

TaskWrites = list[TaskWrite]
Damages = list[Damage]
Heads = list[Head]
T = TypeVar("T")
LAYOUT_VERSION = lua.LAYOUT_VERSION
_OPTIONS: dict[str, OptionKind] = {
    "prefix": str,
    "ttl": (float, NoneType),
    "refresh_on_read": bool,
    "compress": bool,
    "serde": object,
    "retries": int,
    "socket_timeout": float,
    "ssl_ca_certs": (str, os.PathLike, NoneType),
    "ssl_cert_reqs": str,
    "claim_ttl": float,
    "mode": str,
    "on_corrupt": str,
    "async_io": str,
    "index_metadata": (str, list, tuple),  # comma-separated in a URL; a list as a keyword
}

# The longest ttl or claim_ttl, about 31 years: much longer ones overflow Redis's expiry
# times in milliseconds, or the wait between a claim's renewals.
MAX_SECONDS = 10**9


def _seconds(value: object) -> bool:
    """Whether ``value`` is a lifetime: a finite number of seconds > 0, not a bool."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and 0 < value <= MAX_SECONDS  # first: an int too large for a float is refused
        and math.isfinite(value)
    )


class RedisCheckpointer(Checkpointer):
    """A LangGraph checkpointer in Redis.

    Args:
        url: ``redis://[[user]:password@]host[:port][/db]``, ``rediss://...`` (TLS),
            ``redis+cluster://host:port`` or ``rediss+cluster://host:port`` (any node of
            a Cluster). Open a URL with query options (``?prefix=app&ttl=3600``) with
            ``open_checkpointer``.
        options: how to reach the server and name the keys, and how long they live
            (:class:`~statekeeper.backends.redis.RedisCheckpointerOptions`:
            ``prefix``, ``mode``, ``ttl``, ``refresh_on_read``, ``claim_ttl``,
            ``async_io``, ``retries``, ``socket_timeout``, ``ssl_ca_certs``,
            ``ssl_cert_reqs``). A plain
            :class:`~statekeeper.backends.redis.RedisOptions`, such as one shared
            with a ``RedisStore``, keeps the default lifetimes (keys never expire).
            ``mode="ro"`` opens read-only: nothing is ever written (not even on open,
            nor a TTL refresh), every write raises ReadOnlyError.
        serde: the serializer for every payload (default :func:`safe_serde`).
        compress: zlib-compress payloads of 256 bytes or more when that saves space.
        on_corrupt: ``"raise"`` (default): a damaged checkpoint raises
            CorruptCheckpointError; ``"fallback"``: reads log a warning and skip it --
            ``get_tuple`` without an id serves the newest intact checkpoint, listings
            leave damaged ones out. A checkpoint asked for by id loads or raises.
        index_metadata: metadata keys to index (a sequence, or comma-separated text as
            a URL gives it), see :meth:`index_metadata`; ignored read-only.

    Guarantees: every write is checked in full before anything is sent
    (:class:`Checkpointer`); each ``put`` and ``put_writes`` is then one Lua script, so a
    reader never sees a checkpoint without its values and writes, and a put interrupted
    at any point is either entirely stored or not at all (a retried script is
    idempotent). ``delete_thread`` unlinks the thread's keys at once, whatever its size
    (Redis frees them in the background), then its index entries in batches;
    ``delete_for_runs`` visits every registered thread (O(threads + deleted)); ``prune``
    works in bounded batches, and checkpoints put while it runs are newer, so they are
    kept. ``list(None)`` reads a page of the checkpoint index (and a filter on an indexed
    metadata key a page of that key's index): O(page), whatever the number of threads.
    ``copy_thread`` becomes visible all at once and is a snapshot of the source: if the
    source changes while it is read (its change stamp moved, see docs/redis.md), the
    staged copy is discarded and the copy starts again, up to 5 times, then raises
    StorageError, nothing copied. Payloads go through ``serde`` only (never pickled);
    ids are encoded into keys, so no id can reach another thread's keys or outside the
    prefix.
    Integrity: every checkpoint record, value, delta and pending write is stored with a
    CRC-32 checked on read, and the indexes are checked against each other on every read
    of a thread, so damage -- altered or truncated bytes, deleted fields or keys, keys
    overwritten with another type -- raises
    :class:`~statekeeper.errors.CorruptCheckpointError` naming the thread, checkpoint and
    key, never a wrong value; :meth:`verify` lists it. A server that refuses writes (a
    read-only replica) makes writes raise :class:`~statekeeper.errors.ReadOnlyError`.
    Driver errors are raised as :class:`~statekeeper.errors.StorageError` naming the URL
    without its password.

    Raises:
        ConfigurationError: the URL or an option is invalid, or ``redis`` is not installed.
        StorageError: the server cannot be reached.
        StorageNotFoundError: ``mode="ro"`` and the prefix holds no checkpointer data.
        SchemaVersionError: the prefix holds data of a newer statekeeper.
    """

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        options: RedisOptions | None = None,
        *,
        serde: SerializerProtocol | None = None,
        compress: bool = True,
        on_corrupt: str = "raise",
        index_metadata: str | Sequence[str] = (),
    ) -> None:
        declared = metadata_index_keys(index_metadata)
        if not isinstance(options, RedisCheckpointerOptions):
            options = RedisCheckpointerOptions.extending(options)
        self.target = RedisTarget.for_component(url, options, "open_checkpointer()")
        check_choice("option mode", options.mode, MODES)
        self._threads = check_choice("option async_io", options.async_io, ASYNC_IO) == "threads"
        self.on_corrupt = check_choice("option on_corrupt", on_corrupt, ON_CORRUPT)
        ttl, claim_ttl = options.ttl, options.claim_ttl
        if ttl is not None and not _seconds(ttl):
            raise ConfigurationError(
                f"option ttl must be a number of seconds > 0 (finite, at most {MAX_SECONDS:,}),"
                f" got {ttl!r}"
            )
        if check_option("refresh_on_read", bool, options.refresh_on_read) and ttl is None:
            raise ConfigurationError("option refresh_on_read needs a ttl")
        if not _seconds(claim_ttl):
            raise ConfigurationError(
                "option claim_ttl must be a number of seconds > 0 (finite, at most "
                f"{MAX_SECONDS:,}), got {claim_ttl!r}"
            )
        super().__init__(serde=serde or safe_serde())
        self.options = options
        self.prefix = options.prefix
        self.ttl = ttl
        self.compress = check_option("compress", bool, compress)
        ttl_ms = round(ttl * 1000) if ttl else 0
        self.read_only = options.mode == "ro"
        self._plans = Plans(
            self.prefix, ttl_ms, options.refresh_on_read, compress, self.target.cluster
        )
        self._plans.read_only = self.read_only
        self._plans.fallback = self.on_corrupt == "fallback"
        self._conn = Connection(self.target)
        # the async API's hot calls (async_io="threads"), served in turn by one thread
        self._worker = BatchWorker("statekeeper-redis-client", run_each, self._conn.closed_error)
        self._claims = Claims(self._conn, self._plans, claim_ttl)
        try:
            keys = () if self.read_only else declared
            self._conn.run(self._plans.open_layout(self.target.url, keys))
        except BaseException:
            self._conn.close()
            raise

    @classmethod
    def from_url(cls, url: StorageURL, options: Mapping[str, Any]) -> Self:
        """Build from a parsed URL: its query options (text) and keyword ``options``;
        keywords win."""
        merged = parse_options("Redis", _OPTIONS, url.options, options)
        redis_options, rest = RedisCheckpointerOptions.split(merged)
        return cls(url.raw.split("?", 1)[0], redis_options, **rest)

    def index_metadata(self, *keys: str) -> None:
        """Index these top-level metadata keys (names of letters, digits and ``_``), so
        that ``list(filter={key: value})`` -- of every thread or of one -- reads a page of
        that value's checkpoints instead of every checkpoint, for a value that is not
        ``None`` (a filter on ``None`` also matches a missing key: it is filtered as
        before, as are keys not indexed; results are the same either way). Idempotent.
        The keys are remembered under the prefix: every process writing to it keeps the
        index from then on, declared or not. Building one reads every checkpoint once (a
        crash part-way leaves it unused, and the next read-write opening builds it); each
        later put adds two index entries per key. The option ``index_metadata`` (URL:
        ``?index_metadata=user,tenant``) calls this on opening. See docs/redis.md.

        Raises:
            ConfigurationError: a key is not such a name.
            ReadOnlyError: the checkpointer is open read-only.
        """
        checked = metadata_index_keys(keys)
        self._writable("index_metadata")
        self._conn.run(self._plans.declare(checked))

    # -- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        """Disconnect (after the async calls already queued). Idempotent; later calls
        raise StorageError."""
        self._worker.close()
        self._conn.close()

    async def aclose(self) -> None:
        """Disconnect, awaiting the asyncio client of the running loop."""
        if self._worker.thread is None:
            self._worker.close()
        else:  # it finishes what is queued: wait for that off the loop
            await asyncio.to_thread(self._worker.close)
        await self._conn.aclose()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        mode = ", mode='ro'" if self.read_only else ""
        return f"{type(self).__name__}({self.target.url!r}, prefix={self.prefix!r}{mode})"

    def _run(self, op: Op[T], threads: Sequence[str] | str | None) -> T:
        """Run an operation on ``threads`` (``None``: on any), its damage explained."""
        try:
            return self._conn.run(op)
        except StorageError as exc:
            self._explain(exc, threads)
            raise

    async def _arun(
        self, op: Op[T], threads: Sequence[str] | str | None, *, hot: bool = False
    ) -> T:
        """:meth:`_run` for the async API: in a worker thread (``async_io="threads"``;
        a ``hot`` call, one of a turn's small ones, on the thread that serves them all in
        turn), or with the asyncio client of the running loop."""
        if self._threads:
            if hot:
                result: T = await self._worker.submit(functools.partial(self._run, op, threads))
                return result
            return await asyncio.to_thread(self._run, op, threads)
        try:
            return await self._conn.arun(op)
        except StorageError as exc:
            if wrong_type(exc) or damaged_reply(exc):
                await self._conn.arun(self._plans.explain(exc, _many(threads)))
            raise

    def _explain(self, exc: StorageError, threads: Sequence[str] | str | None) -> None:
        """Raise the CorruptCheckpointError ``exc`` stands for, if it stands for one (no
        cost until an operation fails)."""
        if wrong_type(exc) or damaged_reply(exc):
            self._conn.run(self._plans.explain(exc, _many(threads)))

    # -- sync API ----------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names, or the thread's newest in its namespace when it
        names none; ``None`` when there is no such checkpoint. One script call."""
        return self._run(self._plans.get_tuple(self.serde, config), _thread(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by checkpoint id, across every thread when ``config``
        is ``None``), whose metadata equals ``filter`` on every key, strictly older than
        ``before``; at most ``limit``. Read lazily, a page per script call."""
        plan = self._plans.listing(self.serde, config, filter, before, check_limit(limit))
        try:
            yield from self._conn.iterate(plan)
        except StorageError as exc:
            self._explain(exc, _thread(config))
            raise

    def get_writes(self, config: RunnableConfig) -> TaskWrites:
        """The pending writes of the checkpoint ``config`` names (``checkpoint_id``
        required), in ``get_tuple``'s order, with their task paths; ``[]`` for an unknown
        checkpoint. One script call."""
        return self._run(self._plans.writes(self.serde, config), _thread(config))

    def _thread_heads(self, limit: int, after: Head | None) -> Heads:
        """A page of the thread index (a sorted set beside the registry, kept by every
        write: see docs/redis.md); keys of an older layout opened read-only are scanned."""
        if not self._plans.indexed:
            return super()._thread_heads(limit, after)
        return self._run(self._plans.thread_heads(limit, after), None)

    def _claim(self, thread_id: str) -> contextlib.AbstractContextManager[None]:
        """A claim (see :meth:`Checkpointer.claim_thread`) holds across every process and
        host using this server and prefix: a key set only if absent, renewed while held,
        deleted on exit, and expiring ``claim_ttl`` seconds after a dead holder's last
        renewal. Details, and what happens when a renewal finds the claim lost:
        docs/redis.md."""
        return self._claims.claim(thread_id)

    def _claim_holder(self, thread_id: str) -> dict[str, Any] | None:
        return self._claims.holder(thread_id)  # a GET of the claim key

    def verify(self, *, repair: bool = False) -> Damages:
        """Check every record, value, delta, write and index of every registered thread
        (and the registry) and return what is damaged (empty: all intact); reads only.
        With ``repair``, then rebuild what intact records determine -- index members,
        reference counts, write counts, change stamps -- and seal layout-1 records,
        values and writes that have no checksum yet; damaged records are reported and
        left as they are, nothing stored is deleted. Each thread is checked against its
        change stamp, so it can run while others write. See docs/redis.md.

        Raises:
            ReadOnlyError: ``repair`` on a checkpointer opened read-only.
        """
        if repair:
            self._writable("repair the indexes")
        return self._conn.run(Verify(self._plans, self.serde).everything(repair=repair))

    def forget_prefix(self) -> bool:
        """Delete the prefix's own keys (its layout version, its registry of threads and
        the registry's count, the thread index, the indexes across threads and the
        declared metadata keys) once no thread is left under it, so a throwaway prefix
        (a demo's, a test's) leaves no key behind; ``False``, with nothing deleted,
        while a thread is. A writer that opens the prefix meanwhile stores the layout
        again. Delete the threads first (:meth:`delete_thread`).

        Raises:
            ReadOnlyError: on a checkpointer opened read-only.
        """
        self._writable("forget the prefix")
        if not self._conn.run(self._plans.forget()):
            return False
        self._conn.run(_delete(f"{self.prefix}:layout".encode()))
        return True

    # -- storing (checked and prepared by Checkpointer) ---------------------------------

    def _commit_put(self, prepared: PreparedPut) -> None:
        self._run(self._plans.put(self.serde, prepared), prepared.thread_id)

    def _commit_writes(self, prepared: PreparedWrites) -> None:
        self._run(self._plans.put_writes(prepared), prepared.thread_id)

    def _delete_threads(self, thread_ids: Sequence[str]) -> None:
        self._conn.run(self._plans.delete_threads(thread_ids))

    def _delete_runs(self, run_ids: Sequence[str]) -> None:
        self._run(self._plans.delete_runs(run_ids), None)

    def _copy_thread(self, source: str, target: str) -> None:
        self._run(self._plans.copy_thread(source, target), (source, target))

    def _keep_latest(self, ids: Sequence[str]) -> None:
        self._run(self._plans.keep_latest(ids), ids)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Per channel, the writes along the target's ancestors back to the nearest one
        holding a value (the ``seed``), as LangGraph's base class defines it."""
        return self._run(self._plans.delta_history(self.serde, config, channels), _thread(config))

    # -- async API: the same operations on the asyncio client ---------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        plan = self._plans.get_tuple(self.serde, config)
        return await self._arun(plan, _thread(config), hot=True)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        if self._threads:
            listing = super().alist(config, filter=filter, before=before, limit=limit)
            async for item in listing:
                yield item
            return
        plan = self._plans.listing(self.serde, config, filter, before, check_limit(limit))
        try:
            async for item in self._conn.aiterate(plan):
                yield item
        except StorageError as exc:
            if wrong_type(exc) or damaged_reply(exc):
                await self._conn.arun(self._plans.explain(exc, _many(_thread(config))))
            raise

    # The same operations on the asyncio client (the checks ran in Checkpointer's a*).

    async def _acommit_put(self, prepared: PreparedPut) -> None:
        await self._arun(self._plans.put(self.serde, prepared), prepared.thread_id, hot=True)

    async def _acommit_writes(self, prepared: PreparedWrites) -> None:
        await self._arun(self._plans.put_writes(prepared), prepared.thread_id, hot=True)

    async def _adelete_threads(self, thread_ids: Sequence[str]) -> None:
        await self._arun(self._plans.delete_threads(thread_ids), None)

    async def _adelete_runs(self, run_ids: Sequence[str]) -> None:
        await self._arun(self._plans.delete_runs(run_ids), None)

    async def _acopy_thread(self, source: str, target: str) -> None:
        await self._arun(self._plans.copy_thread(source, target), (source, target))

    async def _akeep_latest(self, ids: Sequence[str]) -> None:
        await self._arun(self._plans.keep_latest(ids), ids)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        plan = self._plans.delta_history(self.serde, config, channels)
        return await self._arun(plan, _thread(config))


def _thread(config: RunnableConfig | None) -> str | None:
    """The thread id ``config`` names, if it names one as text (checked later)."""
    thread_id = (config or {}).get("configurable", {}).get("thread_id")
    return thread_id if isinstance(thread_id, str) else None


def _many(threads: Sequence[str] | str | None) -> Sequence[str] | None:
    """One thread id, several, or ``None`` (any thread) as what ``explain`` takes."""
    return (threads,) if isinstance(threads, str) else threads


def _delete(key: bytes) -> Op[None]:
    yield Cmd(("DEL", key))

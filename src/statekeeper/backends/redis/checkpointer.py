"""``RedisCheckpointer``: checkpoints in Redis (or Valkey), standalone or Cluster.

Plain Redis 6.2+ or Valkey with no modules: sorted sets, hashes and Lua scripts only.
Every key of a thread carries the thread's hash tag, so each write is one script on one
node (atomic, also in a Cluster), and per-thread reads are O(log n + limit). The layout is
documented in ``docs/redis.md`` and :mod:`statekeeper.backends.redis._lua`.

One class serves both APIs: the sync methods use redis-py's synchronous client (shared
by threads), the async methods its asyncio client (one per event loop), and both run the
same operation code (:mod:`statekeeper.backends.redis._reads` and
:mod:`statekeeper.backends.redis._writes`, over :mod:`statekeeper.backends.redis._io`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper._storage.payload import safe_serde
from statekeeper.backends.redis._claims import CLAIM_TTL, Claims
from statekeeper.backends.redis._client import RedisTarget
from statekeeper.backends.redis._io import Batch, Cmd, Connection, Op
from statekeeper.backends.redis._writes import Plans
from statekeeper.checkpointers.base import Checkpointer, TaskWrite
from statekeeper.errors import ConfigurationError, SchemaVersionError
from statekeeper.urls import StorageURL, parse_options

__all__ = ["RedisCheckpointer"]

TaskWrites = list[TaskWrite]
LAYOUT_VERSION = 1
_OPTIONS: dict[str, type] = {
    "prefix": str,
    "ttl": float,
    "refresh_on_read": bool,
    "compress": bool,
    "serde": object,
    "retries": int,
    "socket_timeout": float,
    "ssl_ca_certs": str,
    "ssl_cert_reqs": str,
    "claim_ttl": float,
}


class RedisCheckpointer(Checkpointer):
    """A LangGraph checkpointer in Redis.

    Args:
        url: ``redis://[[user]:password@]host[:port][/db]``, ``rediss://...`` (TLS),
            ``redis+cluster://host:port`` or ``rediss+cluster://host:port`` (any node of
            a Cluster); query options (``?prefix=app&ttl=3600``) set the options below.
        prefix: every key starts with ``<prefix>:``; savers with different prefixes never
            see or touch each other's keys. Letters, digits and ``_ . : / @ + = -``.
        ttl: seconds until a thread's keys expire, all together; every write to the
            thread starts the count again. ``None`` (default): never.
        refresh_on_read: ``get_tuple`` and ``list`` of a thread start the count again too
            (needs ``ttl``).
        serde: the serializer for every payload (default :func:`safe_serde`).
        compress: zlib-compress payloads of 1 KiB or more when that saves space.
        retries: how often a command is retried, with exponential backoff (0.1 s up to
            1 s between attempts), after a dropped connection or a timeout.
        socket_timeout: seconds to wait for a connection or a reply.
        ssl_ca_certs, ssl_cert_reqs: TLS trust settings for ``rediss`` URLs.
        claim_ttl: seconds a ``claim_thread`` claim outlives its holder (it is renewed
            every third of that while held, so only a dead or cut-off holder loses it).

    Guarantees: each ``put`` and ``put_writes`` is one Lua script, so a reader never sees
    a checkpoint without its values and writes, and a put interrupted at any point is
    either entirely stored or not at all (a retried script is idempotent). ``copy_thread``
    becomes visible all at once and is a snapshot of the source. Payloads go through
    ``serde`` only (never pickled); ids are encoded into keys, so no id can reach another
    thread's keys or outside the prefix.
    Driver errors are raised as :class:`~statekeeper.errors.StorageError` naming the URL
    without its password.

    Raises:
        ConfigurationError: the URL or an option is invalid, or ``redis`` is not installed.
        StorageError: the server cannot be reached.
        SchemaVersionError: the prefix holds data of a newer statekeeper.
    """

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "statekeeper",
        ttl: float | None = None,
        refresh_on_read: bool = False,
        serde: SerializerProtocol | None = None,
        compress: bool = True,
        retries: int = 5,
        socket_timeout: float = 10.0,
        ssl_ca_certs: str | None = None,
        ssl_cert_reqs: str = "required",
        claim_ttl: float = CLAIM_TTL,
    ) -> None:
        self.target = RedisTarget.for_component(
            url,
            prefix,
            "open_checkpointer()",
            retries=retries,
            socket_timeout=socket_timeout,
            ssl_ca_certs=ssl_ca_certs,
            ssl_cert_reqs=ssl_cert_reqs,
        )
        if ttl is not None and not (isinstance(ttl, int | float) and ttl > 0):
            raise ConfigurationError(f"option ttl must be a number of seconds > 0, got {ttl!r}")
        if refresh_on_read and ttl is None:
            raise ConfigurationError("option refresh_on_read needs a ttl")
        if isinstance(claim_ttl, bool) or not (
            isinstance(claim_ttl, int | float) and claim_ttl > 0
        ):
            raise ConfigurationError(
                f"option claim_ttl must be a number of seconds > 0, got {claim_ttl!r}"
            )
        super().__init__(serde=serde or safe_serde())
        self.prefix = prefix
        self.ttl = ttl
        ttl_ms = round(ttl * 1000) if ttl else 0
        self._plans = Plans(prefix, ttl_ms, refresh_on_read, compress, self.target.cluster)
        self._conn = Connection(self.target)
        self._claims = Claims(self._conn, self._plans, claim_ttl)
        try:
            self._conn.run(self._check_layout())
        except BaseException:
            self._conn.close()
            raise

    @classmethod
    def from_url(cls, url: StorageURL, options: Mapping[str, Any]) -> Self:
        """Build from a parsed URL: its query options (text) and keyword ``options``;
        keywords win."""
        merged = parse_options("Redis", _OPTIONS, url.options, options)
        base = url.raw.split("?", 1)[0]
        return cls(base, **merged)

    def _check_layout(self) -> Op[None]:
        key = f"{self.prefix}:layout"
        _, stored = yield Batch((Cmd(("SETNX", key, LAYOUT_VERSION)), Cmd(("GET", key))))
        if stored is None:
            return
        if not (stored.isascii() and stored.isdigit()):
            raise SchemaVersionError(
                f"the key {key!r} at {self.target.url} holds {stored.decode(errors='replace')!r}"
                ", not a statekeeper layout version: it belongs to something else; "
                "use another prefix"
            )
        if int(stored) > LAYOUT_VERSION:
            raise SchemaVersionError(
                f"the keys under prefix {self.prefix!r} at {self.target.url} use layout "
                f"version {int(stored)}, newer than this statekeeper knows "
                f"({LAYOUT_VERSION}); upgrade statekeeper"
            )

    # -- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        """Disconnect. Idempotent; later calls raise StorageError."""
        self._conn.close()

    async def aclose(self) -> None:
        """Disconnect, awaiting the asyncio client of the running loop."""
        await self._conn.aclose()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.target.url!r}, prefix={self.prefix!r})"

    # -- sync API ----------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names, or the thread's newest in its namespace when it
        names none; ``None`` when there is no such checkpoint. One script call."""
        return self._conn.run(self._plans.get_tuple(self.serde, config))

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
        plan = self._plans.listing(self.serde, config, filter, before, limit)
        yield from self._conn.iterate(plan)

    def get_writes(self, config: RunnableConfig) -> TaskWrites:
        """The pending writes of the checkpoint ``config`` names (``checkpoint_id``
        required), in ``get_tuple``'s order, with their task paths; ``[]`` for an unknown
        checkpoint. One script call."""
        return self._conn.run(self._plans.writes(self.serde, config))

    def claim_thread(self, thread_id: str) -> contextlib.AbstractContextManager[None]:
        """Claim ``thread_id`` for a ``with`` block, across every process and host using
        this server and prefix: a key set only if absent, renewed while held, deleted on
        exit, and expiring ``claim_ttl`` seconds after a dead holder's last renewal.
        Details, and what happens when a renewal finds the claim lost: docs/redis.md.

        Raises:
            ThreadBusyError: another run holds the claim; the error names the holder.
            InvalidIdError: ``thread_id`` cannot be stored.
        """
        return self._claims.claim(thread_id)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store ``checkpoint`` as a child of the checkpoint ``config`` names, writing the
        values of the channels in ``new_versions`` only. Atomic: all or nothing."""
        plan = self._plans.put(self.serde, config, checkpoint, metadata, new_versions)
        return self._conn.run(plan)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes, atomically. A regular write already stored for
        (task, index) is kept; special channels (``__error__``...) are replaced."""
        self._conn.run(self._plans.put_writes(self.serde, config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint, value and write of ``thread_id`` at once, whatever its
        size (the thread's keys are unlinked; Redis frees them in the background)."""
        self._conn.run(self._plans.delete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and writes) of these runs in every thread, and values no
        remaining checkpoint uses. Visits every registered thread: O(threads + deleted)."""
        self._conn.run(self._plans.delete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every key of the source thread to the target, page by page into staging
        keys that appear under the target's names all at once. The copy is a snapshot:
        if the source changes while it is read (a put, prune or delete_for_runs: its
        change stamp moved, see docs/redis.md), the staged copy is discarded and the copy
        starts again, up to 5 times.

        Raises:
            ThreadExistsError: the target thread already has checkpoints (nothing changes).
            StorageError: the source kept changing during every attempt (nothing copied).
        """
        self._conn.run(self._plans.copy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``"keep_latest"``: keep the newest checkpoint of each namespace (with its writes,
        the values it uses, and the ancestors LangGraph's ``DeltaChannel`` rebuilds from);
        checkpoints put while pruning are newer and kept. ``"delete"``: delete the threads.
        Works in bounded batches, whatever the thread's size."""
        self._conn.run(self._plans.prune(thread_ids, strategy))

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Per channel, the writes along the target's ancestors back to the nearest one
        holding a value (the ``seed``), as LangGraph's base class defines it."""
        return self._conn.run(self._plans.delta_history(self.serde, config, channels))

    # -- async API: the same operations on the asyncio client ---------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._conn.arun(self._plans.get_tuple(self.serde, config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        plan = self._plans.listing(self.serde, config, filter, before, limit)
        async for item in self._conn.aiterate(plan):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        plan = self._plans.put(self.serde, config, checkpoint, metadata, new_versions)
        return await self._conn.arun(plan)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        plan = self._plans.put_writes(self.serde, config, writes, task_id, task_path)
        await self._conn.arun(plan)

    async def adelete_thread(self, thread_id: str) -> None:
        await self._conn.arun(self._plans.delete_thread(thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._conn.arun(self._plans.delete_for_runs(run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._conn.arun(self._plans.copy_thread(source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._conn.arun(self._plans.prune(thread_ids, strategy))

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return await self._conn.arun(self._plans.delta_history(self.serde, config, channels))

"""``Checkpointer``: what every statekeeper backend shares on top of LangGraph's base.

This class owns the write path. ``put``, ``put_writes``, ``delete_thread``,
``delete_for_runs``, ``copy_thread`` and ``prune`` (and their async twins) are written
once, here: they check every id, the metadata and the channel versions, serialise the
checkpoint and the pending writes (:mod:`.prepare`), and hand a prepared record
(:mod:`statekeeper.checkpointers.records`) or checked ids to one small backend method that
only stores: ``_commit_put``, ``_commit_writes``, ``_delete_threads``, ``_delete_runs``,
``_copy_thread``, ``_keep_latest``. So every backend refuses the same input with the same
error, before anything is written.

A backend implements those methods and the reads (thread-safe: LangGraph calls ``put``
from background threads) and ``close()``. This class adds the context-manager protocol,
versions, and an async API that runs the sync code in a worker thread, so the event loop
never blocks; a backend with a native async driver overrides the ``_a*`` twins of the
storing methods (``_acommit_put``...) and the async reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, NamedTuple, Self

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)

from statekeeper._storage.claims import ahold, check_wait, hold
from statekeeper._storage.payload import COMPRESS_MIN_BYTES, check_id
from statekeeper.checkpointers.heads import Head, check_page, newest_heads, scan_heads
from statekeeper.checkpointers.prepare import Packing, prepare_put, prepare_writes
from statekeeper.checkpointers.records import PreparedPut, PreparedWrites
from statekeeper.checkpointers.semantics import (
    check_copy_ids,
    check_prune_ids,
    check_run_ids,
    next_version,
)
from statekeeper.errors import Damage, ReadOnlyError

__all__ = ["Checkpointer", "TaskWrite"]

_ASYNC_BATCH = 100  # tuples fetched per worker-thread hop in alist


class TaskWrite(NamedTuple):
    """One pending write with everything needed to store it again elsewhere exactly."""

    task_id: str
    task_path: str
    channel: str
    value: Any


class Checkpointer(BaseCheckpointSaver[str]):
    """Base class of statekeeper's checkpointers (see the module docstring).

    ``compress``: whether payloads of ``compress_min_bytes`` (256) or more are compressed
    (zlib, when that saves space; the checkpoint and writes here, values by the backend).
    ``read_only``: every write (and ``claim_thread``) raises
    :class:`~statekeeper.errors.ReadOnlyError` before anything is touched.
    """

    compress: bool = True
    compress_min_bytes: int = COMPRESS_MIN_BYTES
    read_only: bool = False  # set by the backend: opened with ?mode=ro, or not writable

    def close(self) -> None:
        """Release the backend's resources. Idempotent; later use raises StorageError."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def get_next_version(self, current: str | int | float | None, channel: None = None) -> str:
        """A version greater than ``current`` (see :func:`next_version`)."""
        return next_version(current)

    # -- the write path: checked and prepared here, stored by the backend ---------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store ``checkpoint`` as a child of the checkpoint ``config`` names (its
        ``checkpoint_id``, if any), storing the values of the channels in
        ``new_versions`` only: the others keep the versions stored earlier. Returns the
        config naming the stored checkpoint.

        Everything is checked, and the checkpoint serialised, before anything is written;
        the backend then stores it atomically: all of it, or nothing if it fails.

        Raises:
            ConfigurationError: the config names no thread.
            InvalidIdError: a thread id, namespace, checkpoint id (the config's or the
                checkpoint's), run id (the metadata's ``run_id``) or channel name cannot
                be stored.
            SerializationError: the metadata or a channel version is not JSON, or the
                checkpoint or a channel value cannot be stored exactly.
            StorageError: the storage failed, or the checkpointer is closed.
        """
        prepared = self._prepare_put(config, checkpoint, metadata, new_versions)
        self._commit_put(prepared)
        return prepared.config

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes for the checkpoint ``config`` names. Idempotent:
        a regular write already stored for (task, index) is kept; the special channels
        (``__error__``, ``__interrupt__``...) replace the write stored for them.

        Everything is checked and serialised before anything is written; the backend
        then stores the writes atomically: all of them, or none if it fails.

        Raises:
            ConfigurationError: the config names no thread, or no ``checkpoint_id``.
            InvalidIdError: a thread id, namespace, checkpoint id, task id, task path or
                channel name cannot be stored.
            SerializationError: a value cannot be stored exactly.
            StorageError: the storage failed, or the checkpointer is closed.
        """
        self._commit_writes(self._prepare_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint, value and write of ``thread_id`` (all namespaces).

        Raises:
            InvalidIdError: ``thread_id`` cannot be stored (nothing is deleted).
        """
        self._writable("delete_thread")
        self._delete_threads((check_id(thread_id, "thread_id"),))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) created by any of ``run_ids`` (the
        ``run_id`` of their metadata), in every thread and namespace; values no remaining
        checkpoint uses are deleted too. No ids: nothing to do.

        Raises:
            InvalidIdError: a run id cannot be stored (every id is checked before
                anything is deleted).
        """
        self._writable("delete_for_runs")
        ids = check_run_ids(run_ids)
        if ids:
            self._delete_runs(ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint (all namespaces, parents and ids kept), value and write
        of the source thread to the target thread. A missing source copies nothing.

        Raises:
            InvalidIdError: a thread id cannot be stored (nothing is copied).
            ThreadExistsError: the target thread already has checkpoints (nothing
                changes; delete it first or pick another id).
        """
        self._writable("copy_thread")
        self._copy_thread(*check_copy_ids(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Shrink threads. ``"keep_latest"`` keeps the newest checkpoint of each namespace
        (with its writes and every value it uses) — plus, when the graph uses LangGraph's
        ``DeltaChannel``, the ancestors its delta channels need to be rebuilt.
        ``"delete"`` removes the threads entirely.

        Raises:
            ConfigurationError: ``strategy`` is neither; nothing is deleted.
            InvalidIdError: a thread id cannot be stored; nothing is deleted.
        """
        self._writable("prune")
        delete, ids = check_prune_ids(thread_ids, strategy)
        if ids:
            (self._delete_threads if delete else self._keep_latest)(ids)

    def _prepare_put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        *,
        defer: bool = False,
    ) -> PreparedPut:
        """Check a ``put`` and prepare what to store (see :meth:`put` for the errors, and
        :func:`.prepare.prepare_put`); with ``defer``, its compression is left to
        ``packed()``. Writes nothing."""
        self._writable("put")
        packing = self._packing(defer)
        return prepare_put(self.serde, packing, config, checkpoint, metadata, new_versions)

    def _prepare_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
        *,
        defer: bool = False,
    ) -> PreparedWrites:
        """Check a ``put_writes`` and serialise its writes (see :meth:`put_writes` for the
        errors, and :func:`.prepare.prepare_writes`); with ``defer``, their compression
        is left to ``packed()``. Writes nothing."""
        self._writable("put_writes")
        packing = self._packing(defer)
        return prepare_writes(self.serde, packing, config, writes, task_id, task_path)

    def _packing(self, defer: bool) -> Packing:
        return Packing(self.compress, self.compress_min_bytes, defer)

    def _writable(self, operation: str) -> None:
        """Raise :class:`ReadOnlyError` for ``operation`` when the storage is read-only."""
        if self.read_only:
            raise ReadOnlyError(
                f"cannot {operation}: {self!r} is open read-only (mode=ro, or the storage "
                "is not writable); open it read-write on writable storage to change it"
            )

    # -- what a backend stores: called with checked input only ---------------------------

    def _commit_put(self, prepared: PreparedPut) -> None:
        """Store a prepared checkpoint and the values of its ``new_versions``, atomically:
        a failure leaves what was stored before. Replaces a checkpoint of the same id.
        Stores ``prepared.packed()`` (``aput`` defers compression; see :mod:`.records`),
        as do ``_commit_writes`` and the async twins, on the thread that stores."""
        raise NotImplementedError

    def _commit_writes(self, prepared: PreparedWrites) -> None:
        """Store prepared pending writes (``prepared.packed()``) atomically, keeping
        regular writes already stored for the same (task, idx) and replacing special
        ones (``WriteRow.replaces``)."""
        raise NotImplementedError

    def _delete_threads(self, thread_ids: Sequence[str]) -> None:
        """Delete these checked, distinct threads (one or more), all namespaces, each at once."""
        raise NotImplementedError

    def _delete_runs(self, run_ids: Sequence[str]) -> None:
        """Delete these checked run ids' checkpoints, their writes and the values left unused."""
        raise NotImplementedError

    def _copy_thread(self, source: str, target: str) -> None:
        """Copy the checked source thread to the target; ThreadExistsError if it has any."""
        raise NotImplementedError

    def _keep_latest(self, ids: Sequence[str]) -> None:
        """``prune(ids, strategy="keep_latest")`` for checked thread ids (at least one)."""
        raise NotImplementedError

    def get_writes(self, config: RunnableConfig) -> list[TaskWrite]:
        """The pending writes of the checkpoint ``config`` names (``thread_id``,
        ``checkpoint_ns`` and ``checkpoint_id`` are all required), in the order
        ``get_tuple`` returns them, each with the ``task_path`` it was written with —
        which ``CheckpointTuple.pending_writes`` leaves out, and which a copy to another
        backend needs to keep that order. An unknown checkpoint has none: ``[]``."""
        raise NotImplementedError

    def thread_heads(self, *, limit: int, after: tuple[str, str] | None = None) -> list[Head]:
        """At most ``limit`` threads' heads (thread id, id of its newest root checkpoint),
        newest first, after the head ``after`` (the last of the previous page; ``None``:
        from the newest): see :mod:`statekeeper.checkpointers.heads` for the order. Read
        from the index the backend keeps at write time, so a page costs O(limit), whatever
        the number of threads. Reads only: works on read-only storage.

        Raises:
            ConfigurationError: ``limit`` is not a positive int, or ``after`` no pair.
        """
        return self._thread_heads(*check_page(limit, after))

    def _thread_heads(self, limit: int, after: Head | None) -> list[Head]:
        """``thread_heads``, checked; this default scans (a backend with an index overrides)."""
        return newest_heads(scan_heads(self), limit, after)

    def verify(self, *, repair: bool = False) -> list[Damage]:
        """Check every stored record of every thread — checkpoints, metadata, pending
        writes, values, deltas and the indexes that list them — against its checksum,
        and return what is damaged (empty: all intact). Reads only, unless ``repair``:
        then what can be rebuilt from intact records is (indexes, checksums of records
        written before they had one), and what cannot is reported, never deleted.

        Raises:
            ReadOnlyError: ``repair`` on read-only storage.
        """
        raise NotImplementedError

    def claim_thread(
        self, thread_id: str, *, wait: float | None = None
    ) -> contextlib.AbstractContextManager[None]:
        """Claim ``thread_id`` for one run, for the duration of a ``with`` block.

        Exclusive between the threads of this process and every other process using the
        same storage; released when the block exits or the holder dies. Advisory: reads
        and writes never check it; runners take it so two never advance one thread at
        once. A busy claim is retried for ``wait`` seconds (``math.inf``: until free).

        Raises:
            ThreadBusyError: another run holds the claim (still, after ``wait``); the
                error names the holder.
            InvalidIdError: ``thread_id`` cannot be stored.
            ReadOnlyError: the storage is read-only.
        """
        self._writable("claim_thread")
        thread_id, wait = check_id(thread_id, "thread_id"), check_wait(wait)
        return hold(lambda: self._claim(thread_id), wait)

    def aclaim_thread(
        self, thread_id: str, *, wait: float | None = None
    ) -> contextlib.AbstractAsyncContextManager[None]:
        """:meth:`claim_thread` for ``async with``; the event loop never blocks."""
        self._writable("claim_thread")
        thread_id, wait = check_id(thread_id, "thread_id"), check_wait(wait)
        return ahold(lambda: self._claim(thread_id), wait)

    def claim_holder(self, thread_id: str) -> dict[str, Any] | None:
        """Who holds the claim on ``thread_id`` (``pid``, ``host``, ``since``... as far as
        the backend knows), or ``None``: nobody, or a dead holder whose claim expired.
        Never takes the claim and never creates anything: works on read-only storage."""
        return self._claim_holder(check_id(thread_id, "thread_id"))

    def _claim(self, thread_id: str) -> contextlib.AbstractContextManager[None]:
        """One attempt at the claim on a checked ``thread_id``; ThreadBusyError if held."""
        raise NotImplementedError

    def _claim_holder(self, thread_id: str) -> dict[str, Any] | None:
        raise NotImplementedError  # claim_holder for a checked thread_id

    # -- async API: the sync code in a worker thread ------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        items = self.list(config, filter=filter, before=before, limit=limit)
        while batch := await asyncio.to_thread(_take, items, _ASYNC_BATCH):
            for item in batch:
                yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        prepared = self._prepare_put(config, checkpoint, metadata, new_versions, defer=True)
        await self._acommit_put(prepared)
        return prepared.config

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        prepared = self._prepare_writes(config, writes, task_id, task_path, defer=True)
        await self._acommit_writes(prepared)

    async def adelete_thread(self, thread_id: str) -> None:
        self._writable("delete_thread")
        await self._adelete_threads((check_id(thread_id, "thread_id"),))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._writable("delete_for_runs")
        ids = check_run_ids(run_ids)
        if ids:
            await self._adelete_runs(ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._writable("copy_thread")
        await self._acopy_thread(*check_copy_ids(source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._writable("prune")
        delete, ids = check_prune_ids(thread_ids, strategy)
        if ids:
            await (self._adelete_threads if delete else self._akeep_latest)(ids)

    # The async twins of the storing methods: the sync code in a worker thread (the
    # checks and the serialisation above run before, on the caller's thread).

    async def _acommit_put(self, prepared: PreparedPut) -> None:
        await asyncio.to_thread(self._commit_put, prepared)

    async def _acommit_writes(self, prepared: PreparedWrites) -> None:
        await asyncio.to_thread(self._commit_writes, prepared)

    async def _adelete_threads(self, thread_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self._delete_threads, thread_ids)

    async def _adelete_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self._delete_runs, run_ids)

    async def _acopy_thread(self, source: str, target: str) -> None:
        await asyncio.to_thread(self._copy_thread, source, target)

    async def _akeep_latest(self, ids: Sequence[str]) -> None:
        await asyncio.to_thread(self._keep_latest, ids)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return await asyncio.to_thread(
            lambda: self.get_delta_channel_history(config=config, channels=channels)
        )


def _take(items: Iterator[CheckpointTuple], n: int) -> list[CheckpointTuple]:
    return list(itertools.islice(items, n))

"""``Checkpointer``: what every statekeeper backend shares on top of LangGraph's base.

A backend implements the synchronous API (thread-safe, since LangGraph calls ``put`` from
background threads) and ``close()``. This class adds the context-manager protocol,
versions, and an async API that runs the sync code in a worker thread, so the event loop
never blocks. A backend with a native async driver overrides the ``a*`` methods.
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

from statekeeper._storage.payload import check_id
from statekeeper.checkpointers.semantics import check_prune_strategy, next_version

__all__ = ["Checkpointer", "TaskWrite"]

_ASYNC_BATCH = 100  # tuples fetched per worker-thread hop in alist


class TaskWrite(NamedTuple):
    """One pending write with everything needed to store it again elsewhere exactly."""

    task_id: str
    task_path: str
    channel: str
    value: Any


class Checkpointer(BaseCheckpointSaver[str]):
    """Base class of statekeeper's checkpointers (see the module docstring)."""

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

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Shrink threads. ``"keep_latest"`` keeps the newest checkpoint of each namespace
        (with its writes and every value it uses) — plus, when the graph uses LangGraph's
        ``DeltaChannel``, the ancestors its delta channels need to be rebuilt.
        ``"delete"`` removes the threads entirely.

        Raises:
            ConfigurationError: ``strategy`` is neither; nothing is deleted.
        """
        check_prune_strategy(strategy)
        ids = [check_id(thread_id, "thread_id") for thread_id in thread_ids]
        if strategy == "delete":
            for thread_id in ids:
                self.delete_thread(thread_id)
        else:
            self._keep_latest(ids)

    def _keep_latest(self, ids: Sequence[str]) -> None:
        """``prune(ids, strategy="keep_latest")`` for validated thread ids."""
        raise NotImplementedError

    def get_writes(self, config: RunnableConfig) -> list[TaskWrite]:
        """The pending writes of the checkpoint ``config`` names (``thread_id``,
        ``checkpoint_ns`` and ``checkpoint_id`` are all required), in the order
        ``get_tuple`` returns them, each with the ``task_path`` it was written with —
        which ``CheckpointTuple.pending_writes`` leaves out, and which a copy to another
        backend needs to keep that order. An unknown checkpoint has none: ``[]``.
        """
        raise NotImplementedError

    def claim_thread(self, thread_id: str) -> contextlib.AbstractContextManager[None]:
        """Claim ``thread_id`` for one run, for the duration of a ``with`` block.

        The claim is exclusive between the threads of this process and every other
        process using the same storage, and is released when the block exits or the
        holding process dies. It is advisory: reads and writes never check it; runners
        take it so two of them never advance one thread at once.

        Raises:
            ThreadBusyError: another run holds the claim; the error names the holder.
            InvalidIdError: ``thread_id`` cannot be stored.
        """
        raise NotImplementedError

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
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return await asyncio.to_thread(
            lambda: self.get_delta_channel_history(config=config, channels=channels)
        )


def _take(items: Iterator[CheckpointTuple], n: int) -> list[CheckpointTuple]:
    return list(itertools.islice(items, n))

"""What a transfer moves: one :class:`Record` per checkpoint, read from any saver.

A record carries a checkpoint with only the values of the channels whose version differs
from its parent's (``new_versions``), so each value is stored once on the other side, as
it was on this one, and its pending writes with their task paths. Records are read one
at a time: a thread costs the ids and channel versions of its checkpoints in memory, plus
the values of one checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
)

from statekeeper.checkpointers.base import TaskWrite
from statekeeper.errors import Refusal, SerializationError, ThreadNotFoundError
from statekeeper.transfer._guard import GuardedSerde, Refused, refusals_in, refused_types

__all__ = [
    "Record",
    "WritesWithPaths",
    "new_versions",
    "plan_thread",
    "read_thread",
    "refused_types",
    "write_calls",
]


@dataclass(frozen=True)
class Record:
    """One checkpoint as a transfer writes it: ``target.put(config-with-parent_id,
    checkpoint, metadata, new_versions)``, then its writes, grouped by :func:`write_calls`.

    ``checkpoint["channel_values"]`` holds the values of ``new_versions``' channels only
    (a channel missing there is stored empty); every other channel keeps its parent's.
    """

    thread_id: str
    checkpoint_ns: str
    parent_id: str | None
    checkpoint: Checkpoint
    metadata: CheckpointMetadata
    new_versions: ChannelVersions
    writes: Sequence[TaskWrite]

    @property
    def checkpoint_id(self) -> str:
        return self.checkpoint["id"]

    def put_config(self) -> RunnableConfig:
        """The config ``put`` takes: the thread, namespace and parent checkpoint."""
        configurable: dict[str, Any] = {
            "thread_id": self.thread_id,
            "checkpoint_ns": self.checkpoint_ns,
        }
        if self.parent_id is not None:
            configurable["checkpoint_id"] = self.parent_id
        return {"configurable": configurable}


@dataclass(frozen=True)
class Ref:
    """A checkpoint of the thread being read, as listed: where it is and its versions."""

    checkpoint_ns: str
    checkpoint_id: str
    parent_id: str | None
    channel_versions: ChannelVersions


def new_versions(versions: ChannelVersions, parent: ChannelVersions | None) -> ChannelVersions:
    """The channels whose version differs from the parent's (all of them without one).
    Versions of different types differ: ``1`` is not ``"1"``."""
    if parent is None:
        return dict(versions)
    return {
        channel: version
        for channel, version in versions.items()
        if channel not in parent or not _same(parent[channel], version)
    }


def _same(a: object, b: object) -> bool:
    return type(a) is type(b) and a == b


def write_calls(writes: Sequence[TaskWrite]) -> Iterator[tuple[str, str, list[tuple[str, Any]]]]:
    """``(task_id, task_path, writes)`` per ``put_writes`` call that stores ``writes`` again
    with the same order: a task's regular writes in one call (indexes from 0, in order),
    each special-channel write (``__error__``...) in a call of its own, at its fixed index.

    Raises:
        SerializationError: one task has writes under two task paths; no call could
            store them both again.
    """
    paths: dict[str, str] = {}
    regular: dict[str, list[tuple[str, Any]]] = {}
    for write in writes:
        if paths.setdefault(write.task_id, write.task_path) != write.task_path:
            raise SerializationError(
                f"task {write.task_id!r} has writes under two task paths "
                f"({paths[write.task_id]!r} and {write.task_path!r}); they cannot be stored "
                "again in their order"
            )
        if write.channel in WRITES_IDX_MAP:
            yield write.task_id, write.task_path, [(write.channel, write.value)]
        else:
            regular.setdefault(write.task_id, []).append((write.channel, write.value))
    for task_id, task_writes in regular.items():
        yield task_id, paths[task_id], task_writes


def plan_thread(source: BaseCheckpointSaver[Any], thread_id: str) -> list[Ref]:
    """Every checkpoint of ``thread_id`` (all namespaces), each after its parent, else in
    checkpoint id order (LangGraph's ids grow with time): the order to store them in."""
    refs = sorted(
        (
            Ref(
                tup.config["configurable"].get("checkpoint_ns", ""),
                tup.config["configurable"]["checkpoint_id"],
                tup.parent_config["configurable"]["checkpoint_id"] if tup.parent_config else None,
                {}
                if isinstance(tup.checkpoint, Refused)
                else dict(tup.checkpoint["channel_versions"]),
            )
            for tup in source.list({"configurable": {"thread_id": thread_id}})
        ),
        key=lambda ref: (ref.checkpoint_id, ref.checkpoint_ns),
    )
    return list(_parents_first(refs))


def _parents_first(refs: list[Ref]) -> Iterator[Ref]:
    by_key = {(ref.checkpoint_ns, ref.checkpoint_id): ref for ref in refs}
    placed: set[tuple[str, str]] = set()
    for ref in refs:
        chain: list[Ref] = []
        here: Ref | None = ref
        while here is not None and (here.checkpoint_ns, here.checkpoint_id) not in placed:
            placed.add((here.checkpoint_ns, here.checkpoint_id))
            chain.append(here)
            parent = here.parent_id
            here = by_key.get((here.checkpoint_ns, parent)) if parent is not None else None
        yield from reversed(chain)


@runtime_checkable
class WritesWithPaths(Protocol):
    """A saver that reads pending writes with their task paths (statekeeper's
    checkpointers, and the transfers' openers of LangGraph's savers)."""

    def get_writes(self, config: RunnableConfig) -> Sequence[TaskWrite]: ...


def read_thread(
    source: BaseCheckpointSaver[Any], thread_id: str, refs: list[Ref], refusals: list[Refusal]
) -> Iterator[Record | None]:
    """One item per ref of ``refs`` (from :func:`plan_thread`), in that order: its record,
    or ``None`` when a value of that checkpoint was refused (each refusal is appended to
    ``refusals``; the thread's other checkpoints are still read, to find every refusal).

    A value is refused when the source's serde would not rebuild it: a
    :class:`~statekeeper.transfer._guard.GuardedSerde` (LangGraph's savers opened by URL)
    says which channel or write; another serde's refusals (a type from a module not
    imported, say) are known only by checkpoint. Pending writes come with their task paths
    from a :class:`WritesWithPaths` source, else from ``pending_writes`` with task path
    ``""``.

    Raises:
        ThreadNotFoundError: a checkpoint was deleted while the thread was being read.
    """
    versions = {(ref.checkpoint_ns, ref.checkpoint_id): ref.channel_versions for ref in refs}
    for ref in refs:
        config: RunnableConfig = {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ref.checkpoint_ns,
                "checkpoint_id": ref.checkpoint_id,
            }
        }
        with refused_types() as unnamed:
            tup = source.get_tuple(config)
            if tup is None:
                raise ThreadNotFoundError(
                    f"thread {thread_id!r}, checkpoint {ref.checkpoint_id!r} was deleted "
                    "while it was being copied"
                )
            if isinstance(source, WritesWithPaths):
                writes: Sequence[TaskWrite] = source.get_writes(config)
            else:
                writes = [TaskWrite(t, "", c, v) for t, c, v in tup.pending_writes or []]
        found = [
            Refusal(thread_id, ref.checkpoint_ns, ref.checkpoint_id, channel, reason)
            for channel, reason in refusals_in(tup, writes)
        ]
        if unnamed and not isinstance(source.serde, GuardedSerde):
            reason = (
                f"the source's serde would not rebuild {', '.join(dict.fromkeys(unnamed))}, "
                "so its value cannot be copied unchanged; import the module that defines it "
                "and try again"
            )
            found.append(Refusal(thread_id, ref.checkpoint_ns, ref.checkpoint_id, None, reason))
        if found:
            refusals.extend(found)
            yield None
            continue
        parent = versions.get((ref.checkpoint_ns, ref.parent_id)) if ref.parent_id else None
        changed = new_versions(ref.channel_versions, parent)
        values = tup.checkpoint["channel_values"]
        checkpoint: Checkpoint = {
            **tup.checkpoint,
            "channel_values": {ch: values[ch] for ch in changed if ch in values},
        }
        yield Record(
            thread_id,
            ref.checkpoint_ns,
            ref.parent_id,
            checkpoint,
            tup.metadata,
            changed,
            writes,
        )

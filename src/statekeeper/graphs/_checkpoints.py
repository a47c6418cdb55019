"""Checkpoints the runner writes itself: migrations, forks and copies of a history.

They are written with the checkpointer directly rather than through ``update_state``,
which would apply the state's reducers to the values (an ``operator.add`` list would be
doubled) and record a node's update, changing what runs next. A checkpoint written here
copies ``versions_seen`` and every channel LangGraph triggers nodes with
(``branch:to:*``), so the same nodes are next.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    copy_checkpoint,
    create_checkpoint,
)
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.constants import START
from langgraph.pregel._task_status import read_task_statuses
from langgraph.types import Interrupt
from pydantic import BaseModel

from statekeeper._storage.serde import msgpack_reader
from statekeeper.checkpointers.base import Checkpointer
from statekeeper.transfer.records import new_versions, write_calls

__all__ = [
    "FORKED_FROM_KEY",
    "FORKED_FROM_THREAD_KEY",
    "GRAPH_KEY",
    "MIGRATED_FROM_KEY",
    "VERSION_KEY",
    "asked_interrupts",
    "copy_history",
    "metadata_reader",
    "stored_values",
    "thread_config",
    "waiting_interrupts",
    "write_child",
    "write_migrated",
]

# Checkpoint metadata keys (JSON scalars, so LangGraph copies them from config["metadata"]
# into every checkpoint of a run).
GRAPH_KEY = "statekeeper_graph"  # "package.module:attr" of the graph that wrote it
VERSION_KEY = "statekeeper_schema_version"  # schema version of its channel values
MIGRATED_FROM_KEY = "statekeeper_migrated_from"  # on a migration: the version before
FORKED_FROM_KEY = "statekeeper_forked_from"  # on a fork: the checkpoint id it copies
FORKED_FROM_THREAD_KEY = "statekeeper_forked_from_thread"  # ...and that checkpoint's thread

_INTERRUPT = "__interrupt__"  # the channel of LangGraph's interrupt writes (private there)


def thread_config(thread_id: str, checkpoint_id: str | None = None) -> RunnableConfig:
    """The config addressing the root namespace of ``thread_id`` (its latest checkpoint,
    or ``checkpoint_id``)."""
    configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def is_state_channel(name: str) -> bool:
    """Whether a stored channel holds a state field. LangGraph's own channels are named
    ``__start__``, ``__pregel_tasks``, ``branch:to:node``...; field names are identifiers
    that pydantic does not let start with ``__``."""
    return name.isidentifier() and not name.startswith("__")


def stored_values(checkpoint: Checkpoint) -> tuple[dict[str, Any], bool]:
    """The state values a checkpoint holds, and whether they are its pending input.

    A run's first checkpoint holds only the input, in ``__start__``, until the first
    super-step writes it into the state's channels: then the input is the state.
    """
    values = {k: v for k, v in checkpoint["channel_values"].items() if is_state_channel(k)}
    pending = checkpoint["channel_values"].get(START)
    if not values and isinstance(pending, Mapping | BaseModel):
        return dict(pending), True
    return values, False


def waiting_interrupts(writes: list[PendingWrite]) -> tuple[Interrupt, ...]:
    """The interrupts of a checkpoint's pending writes still waiting for an answer: those
    of tasks that wrote no output, as LangGraph's ``get_state`` counts them."""
    return tuple(
        interrupt
        for status in read_task_statuses(writes).values()
        for interrupt in status.pending_interrupts
    )


def asked_interrupts(writes: list[PendingWrite]) -> tuple[tuple[str, Interrupt], ...]:
    """Every ``interrupt()`` the super-step after a checkpoint raised, answered since or
    not, as ``(task id, interrupt)`` in stored order: what running that step again (from
    a fork of the checkpoint) asks again."""
    asked = []
    for task_id, channel, value in writes:
        if channel == _INTERRUPT:
            values = value if isinstance(value, list | tuple) else [value]
            asked += [(task_id, found) for found in values if isinstance(found, Interrupt)]
    return tuple(asked)


def write_child(
    saver: BaseCheckpointSaver[Any],
    parent: CheckpointTuple,
    *,
    config: RunnableConfig,
    metadata: Mapping[str, Any],
    values: Mapping[str, Any] | None = None,
) -> RunnableConfig:
    """Store a copy of ``parent``'s checkpoint as a child of the checkpoint ``config``
    names, one step further, with ``metadata``.

    ``values`` (if given) replace the state values (or the pending input, when that is
    the state): removed keys leave the checkpoint, and changed or new ones get a version
    newer than every version in it. Without ``values`` it is an exact copy, whose
    values the thread already stores. Returns the config of the new checkpoint.
    """
    checkpoint = copy_checkpoint(parent.checkpoint)
    new_versions: ChannelVersions = {}
    if values is not None:
        new_versions = _replace_values(saver, checkpoint, values)
    step = parent.metadata.get("step", -1) + 1
    child = create_checkpoint(checkpoint, None, step)
    full: dict[str, Any] = {"parents": parent.metadata.get("parents", {}), **metadata}
    full["step"] = step
    return saver.put(config, child, cast(CheckpointMetadata, full), new_versions)


def _replace_values(
    saver: BaseCheckpointSaver[Any], checkpoint: Checkpoint, values: Mapping[str, Any]
) -> ChannelVersions:
    old, from_input = stored_values(checkpoint)
    channel_values = checkpoint["channel_values"]
    versions = checkpoint["channel_versions"]
    # Like LangGraph's apply_writes: newer than any version, so every node sees a change.
    newest = max(versions.values(), default=None)
    if from_input:
        channel_values[START] = dict(values)
        changed = [START]
    else:
        for key in old.keys() - values.keys():
            del channel_values[key]
            versions.pop(key, None)
        changed = [k for k, v in values.items() if k not in old or not _same(old[k], v)]
        channel_values.update((k, values[k]) for k in changed)
    new_versions = {key: saver.get_next_version(newest, None) for key in changed}
    versions.update(new_versions)
    return new_versions


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # an __eq__ that cannot compare: store the new value
        return False


def copy_history(
    saver: Checkpointer, source: CheckpointTuple, target_thread: str
) -> RunnableConfig:
    """Copy ``source`` and its ancestors (root namespace only), each with its pending
    writes, into ``target_thread`` under the same checkpoint ids and metadata. Returns
    the config of the copy of ``source``. Not atomic: the caller deletes the target
    thread if this raises."""
    lineage = [source]
    while (parent := lineage[-1].parent_config) is not None:
        loaded = saver.get_tuple(parent)
        if loaded is None:  # pruned: the copy starts where the stored history does
            break
        lineage.append(loaded)
    previous: ChannelVersions | None = None
    target = thread_config(target_thread)
    for item in reversed(lineage):
        versions = item.checkpoint["channel_versions"]
        target = saver.put(target, item.checkpoint, item.metadata, new_versions(versions, previous))
        for task_id, task_path, writes in write_calls(saver.get_writes(item.config)):
            saver.put_writes(target, writes, task_id, task_path)
        previous = versions
    return target


def write_migrated(
    saver: BaseCheckpointSaver[Any],
    parent: CheckpointTuple,
    values: Mapping[str, Any],
    *,
    graph_ref: str,
    from_version: int,
    to_version: int,
) -> RunnableConfig:
    """Record ``values`` (the migrated state of ``parent``) as a new checkpoint, child of
    ``parent``: metadata ``source: "update"``, the versions and the graph."""
    return write_child(
        saver,
        parent,
        config=parent.config,
        values=values,
        metadata={
            "source": "update",
            GRAPH_KEY: graph_ref,
            VERSION_KEY: to_version,
            MIGRATED_FROM_KEY: from_version,
        },
    )


def metadata_reader(saver: BaseCheckpointSaver[Any]) -> BaseCheckpointSaver[Any]:
    """A copy of ``saver`` for reading metadata only: stored values of types outside
    msgpack's built-ins come back as ``None``, so no class is looked up or rebuilt and
    nothing is logged about types whose module is not imported yet."""
    return msgpack_reader(saver, _NO_EXTENSIONS)


def _no_ext(code: int, data: bytes) -> None:
    return None


_NO_EXTENSIONS = JsonPlusSerializer(allowed_msgpack_modules=None, __unpack_ext_hook__=_no_ext)

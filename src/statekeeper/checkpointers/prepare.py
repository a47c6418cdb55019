"""Checking and serialising a ``put`` or a ``put_writes`` into the record a backend
stores (:mod:`.records`), written once for every backend: each refuses the same input
with the same error, before anything is written. Reads and writes no storage.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper._storage.payload import check_id, encode
from statekeeper.checkpointers.records import (
    Encoded,
    NewVersion,
    PreparedPut,
    PreparedWrites,
    WriteRow,
)
from statekeeper.checkpointers.semantics import (
    dump_metadata,
    location,
    merged_metadata,
    stored_version,
)
from statekeeper.errors import ConfigurationError, InvalidIdError

__all__ = ["Packing", "prepare_put", "prepare_writes"]


class Packing(NamedTuple):
    """How a checkpointer compresses payloads: when ``compress``, those of ``min_bytes``
    or more (when that saves space); with ``defer``, the record leaves it to its
    ``packed()`` (see :mod:`.records`)."""

    compress: bool
    min_bytes: int
    defer: bool = False

    def encode(self, serde: SerializerProtocol, value: Any) -> tuple[str, str, bytes]:
        """``value`` as a payload (:func:`~statekeeper._storage.payload.encode`)."""
        compress = self.compress and not self.defer
        return encode(serde, value, compress=compress, min_bytes=self.min_bytes)

    @property
    def deferred(self) -> int | None:
        """What a record prepared this way leaves to ``packed()``."""
        return self.min_bytes if self.defer and self.compress else None


def prepare_put(
    serde: SerializerProtocol,
    packing: Packing,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
) -> PreparedPut:
    """A checked ``put`` (see :meth:`.base.Checkpointer.put` for the errors), the
    checkpoint serialised without its channel values, which are left to the backend."""
    thread_id, ns, parent_id = location(config)
    if type(checkpoint["id"]) is not str:
        # stored as text, the id would no longer equal the one inside the checkpoint
        raise InvalidIdError(
            f"checkpoint id must be a string, got {type(checkpoint['id']).__name__} "
            f"{checkpoint['id']!r}; LangGraph's checkpoint ids are uuid6 text"
        )
    checkpoint_id = check_id(checkpoint["id"], "checkpoint id")
    stored_metadata = merged_metadata(config, metadata)
    metadata_json = dump_metadata(stored_metadata)
    run_id = stored_metadata.get("run_id")
    # Only a non-empty text run_id names a run: what delete_for_runs can be asked for.
    run_id = check_id(run_id, "run_id") if isinstance(run_id, str) and run_id else None
    channel_versions: dict[str, Any] = {}
    version_keys: dict[str, str] = {}
    for channel, version in checkpoint["channel_versions"].items():
        name = check_id(channel, "channel name", allow_empty=True)
        channel_versions[name] = version
        version_keys[name] = stored_version(version)
    new = tuple(
        NewVersion(
            check_id(channel, "channel name", allow_empty=True),
            version,
            stored_version(version),
        )
        for channel, version in new_versions.items()
    )
    # The names were checked first, so a bad one is an InvalidIdError, not the
    # SerializationError that serialising the checkpoint holding it would raise.
    stripped: dict[str, Any] = dict(checkpoint)
    values: dict[str, Any] = stripped.pop("channel_values", None) or {}
    return PreparedPut(
        thread_id=thread_id,
        checkpoint_ns=ns,
        checkpoint_id=checkpoint_id,
        parent_id=parent_id,
        run_id=run_id,
        metadata=stored_metadata,
        metadata_json=metadata_json,
        checkpoint=Encoded(*packing.encode(serde, stripped)),
        channel_versions=channel_versions,
        version_keys=version_keys,
        new_versions=new,
        values=values,
        deferred=packing.deferred,
    )


def prepare_writes(
    serde: SerializerProtocol,
    packing: Packing,
    config: RunnableConfig,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
) -> PreparedWrites:
    """A checked ``put_writes``, its writes serialised (see
    :meth:`.base.Checkpointer.put_writes` for the errors)."""
    thread_id, ns, checkpoint_id = location(config)
    if checkpoint_id is None:
        raise ConfigurationError("put_writes needs a config with a checkpoint_id")
    task_id = check_id(task_id, "task_id", allow_empty=True)
    task_path = check_id(task_path, "task_path", allow_empty=True)
    rows: list[WriteRow] = []
    for idx, (channel, value) in enumerate(writes):
        # the name first: an unhashable channel is an InvalidIdError, not a TypeError
        name = check_id(channel, "channel name", allow_empty=True)
        type_, codec, data = packing.encode(serde, value)
        rows.append(WriteRow(WRITES_IDX_MAP.get(name, idx), name, type_, codec, data))
    key = (thread_id, ns, checkpoint_id, task_id, task_path)
    return PreparedWrites(*key, tuple(rows), deferred=packing.deferred)

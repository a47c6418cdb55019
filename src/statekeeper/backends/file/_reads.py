"""How the file checkpointer reads a checkpoint, its pending writes and a delta channel's
history: the loading half of :class:`~statekeeper.backends.file.checkpointer.FileCheckpointer`.

A checkpoint's line holds its metadata, the checkpoint without its values, and where each
value is; values stored by earlier checkpoints are found by bisecting the ``checkpoints``
file, which is opened only when a value (or a delta's base) lives in another line.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.base import Checkpoint, CheckpointTuple, DeltaChannelHistory, PendingWrite
from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper._storage.deltas import RecentPayloads
from statekeeper._storage.lineage import assemble_history
from statekeeper._storage.payload import decode
from statekeeper.backends.file._log.lines import Entry
from statekeeper.backends.file._namespace import (
    Damaged,
    Namespace,
    Payload,
    WriteRow,
    corrupt_error,
    reporting,
)
from statekeeper.backends.file._records import Store
from statekeeper.backends.file._values import Known, Lines, Memo, lines_of, read_value, walk
from statekeeper.checkpointers.base import TaskWrite
from statekeeper.checkpointers.semantics import checkpoint_config, matches

__all__ = ["Reader", "delta_history", "pending_writes", "task_writes"]

log = logging.getLogger("statekeeper.backends.file.checkpointer")


@dataclass(frozen=True, slots=True)
class Reader:
    """Reads checkpoints of namespace ``n`` with the saver's ``serde``, store and last
    written payloads (``recent``); while listing, also with the payloads rebuilt from
    deltas so far (``memo``) and the lines already read by ``Store.newest`` (``seen``),
    which need not be looked up again."""

    serde: SerializerProtocol
    store: Store
    n: Namespace
    recent: RecentPayloads
    memo: Memo | None = None
    seen: Mapping[str, Entry] = field(default_factory=dict)

    def load(
        self, entry: Entry, *, may_skip: bool, filter: dict[str, Any] | None = None
    ) -> CheckpointTuple | None:
        """The tuple of a listed checkpoint; None if ``filter`` rejects it, if it was
        deleted while being read, or (reading leniently, ``on_corrupt="fallback"``, and
        ``may_skip``) if it is damaged, which is then logged.

        Raises:
            CorruptCheckpointError: it is damaged, naming the thread, checkpoint and file.
        """
        if filter and not matches(entry.record["metadata"], filter):
            return None
        n, checkpoint_id = self.n, entry.checkpoint_id
        try:
            return self.read(entry)
        except FileNotFoundError as missing:
            if next(self.store.newest(n, None, checkpoint_id), None) is None:
                return None  # deleted (pruned, thread removed) while we read it: not damage
            reason = getattr(missing, "reason", "the file is missing")
            record = getattr(missing, "record", "value")
            error = corrupt_error(n, checkpoint_id, missing.args[0], reason, record)
        except Damaged as damage:
            error = corrupt_error(n, checkpoint_id, damage.path, damage.reason, damage.record)
        if may_skip and self.store.lenient:
            log.warning("%s; skipped, using an older checkpoint (on_corrupt='fallback')", error)
            return None
        raise error

    def read(self, entry: Entry) -> CheckpointTuple:
        """The checkpoint of ``entry`` with its values and pending writes, unfiltered.

        Raises:
            Damaged: a part of it is damaged.
            FileNotFoundError: a file it needs is gone (damage, or deleted meanwhile).
        """
        n, record = self.n, entry.record
        checkpoint: Checkpoint = decode(self.serde, *n.checkpoint_payload(entry))
        checkpoint["channel_values"] = self._values(entry)
        parent = entry.parent_id
        return CheckpointTuple(
            config=checkpoint_config(n.thread_id, n.ns, entry.checkpoint_id),
            checkpoint=checkpoint,
            metadata=record["metadata"],
            parent_config=checkpoint_config(n.thread_id, n.ns, parent) if parent else None,
            pending_writes=pending_writes(self.serde, n.write_rows(entry.checkpoint_id)),
        )

    def _values(self, entry: Entry) -> dict[str, Any]:
        """The channel values of ``entry``, decoded. The ``checkpoints`` file is opened
        (once) only for values stored by lines not at hand."""
        record = entry.record
        versions = record["channel_versions"]
        values = {}
        with contextlib.ExitStack() as stack:
            opened: list[Lines] = []

            def lines(checkpoint_id: str) -> Entry | None:
                if checkpoint_id == entry.checkpoint_id:
                    return entry
                if checkpoint_id in self.seen:
                    return self.seen[checkpoint_id]
                if not opened:  # open the file only for values stored by other lines
                    opened.append(
                        lines_of(stack.enter_context(self.store.index(self.n, again=True)), entry)
                    )
                return opened[0](checkpoint_id)

            known = Known(self.recent, self.memo)
            for channel, at in record["values"].items():
                version = versions[channel]
                payload = read_value(self.n, lines, at, channel, version, known)
                values[channel] = value = decode(self.serde, *payload)
                # what the next put appends to: it serialises only the appended elements
                self.recent.adopt((self.n.thread_id, self.n.ns, channel), payload[2], value)
        return values


def task_writes(
    serde: SerializerProtocol, rows: Sequence[WriteRow], channel: str | None = None
) -> list[TaskWrite]:
    """Stored write rows (in ``writes_sort_key`` order) decoded in that order; only those
    to ``channel`` if given."""
    return [
        TaskWrite(task_id, task_path, ch, decode(serde, type_, codec, blob))
        for task_id, _, ch, task_path, type_, codec, blob in rows
        if channel is None or ch == channel
    ]


def pending_writes(
    serde: SerializerProtocol, rows: Sequence[WriteRow], channel: str | None = None
) -> list[PendingWrite]:
    """:func:`task_writes` as LangGraph's ``(task_id, channel, value)``."""
    return [(w.task_id, w.channel, w.value) for w in task_writes(serde, rows, channel)]


def delta_history(
    serde: SerializerProtocol,
    store: Store,
    n: Namespace,
    checkpoint_id: str | None,
    channels: Sequence[str],
) -> Mapping[str, DeltaChannelHistory]:
    """See ``FileCheckpointer.get_delta_channel_history``: follows parent ids through the
    ``checkpoints`` file (bisecting it once per ancestor), reading only the writes and
    seeds it needs."""
    target = next(store.newest(n, None, checkpoint_id), None)
    chains: dict[str, list[str]] = {ch: [] for ch in channels}
    seeds: dict[str, Payload] = {}
    rows: dict[str, list[WriteRow]] = {}
    if target is not None:
        with reporting(n, target.checkpoint_id), store.index(n) as view:
            chains, seeds = walk(n, view, target, channels)
            for ancestor in {c for chain in chains.values() for c in chain}:
                rows[ancestor] = n.write_rows(ancestor)

    def writes_of(ancestor: str, ch: str) -> list[PendingWrite]:
        return pending_writes(serde, rows[ancestor], ch)

    decoded = {ch: decode(serde, *payload) for ch, payload in seeds.items()}
    return assemble_history(channels, chains, decoded, writes_of)

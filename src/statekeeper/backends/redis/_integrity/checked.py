"""How the Redis checkpointer's reads turn ``READ`` replies into checkpoints, checking
everything on the way (see "Integrity" in ``docs/redis.md``):

* per thread, on every read: the indexes agree (as many ``ids`` and ``ns`` members as
  ``cp`` records: a deleted member or record shows), and a thread with sealed records
  still has its change stamp in ``refs`` (a deleted ``refs`` shows);
* per checkpoint: its record, values, deltas and writes pass their seals and parse, a
  record the indexes list exists, a value a record loads exists (and was not emptied),
  a delta chain reaches a full value, and there are as many writes as ``refs`` counts.

Damage raises :class:`~statekeeper.errors.CorruptCheckpointError`; with
``on_corrupt="fallback"`` a listing logs it and skips the checkpoint instead, and damage
of a whole thread's indexes is logged and the read goes on.
"""

from __future__ import annotations

import logging
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, CheckpointTuple
from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper._storage.payload import decode
from statekeeper.backends.redis._client import split_ordered
from statekeeper.backends.redis._integrity.records import Payloads, Record, decode_writes
from statekeeper.backends.redis._integrity.seal import SEAL, Bad, corrupt, damage
from statekeeper.backends.redis._layout import Item, Layout, pending
from statekeeper.backends.redis._lua import STAMP
from statekeeper.checkpointers.base import TaskWrite
from statekeeper.checkpointers.semantics import checkpoint_config
from statekeeper.errors import CorruptCheckpointError, SerializationError

__all__ = ["Checked", "checked_checkpoint", "log"]

log = logging.getLogger("statekeeper.backends.redis.checkpointer")


class Checked(Layout):
    """Checked decoding of READ replies (see the module docstring)."""

    def _checked(self, thread_id: str, reply: list[Any]) -> list[Item]:
        """The items of a READ reply, after the checks of the whole thread."""
        (ids, ns, cp, stamped), items = reply
        if not ids == ns == cp:
            odd = "cp" if ids == ns else "ns" if ids == cp else "ids"
            reason = (
                f"its indexes disagree: ids lists {ids} checkpoints, ns {ns}, and cp holds "
                f"{cp} records (index members or records were deleted)"
            )
            self._thread_damage(thread_id, Bad(reason, "index", odd))
        if not stamped and any(item[1] and item[1][:1] == SEAL for item in items):
            reason = "its change stamp is missing from refs (refs was deleted or emptied)"
            self._thread_damage(thread_id, Bad(reason, "index", "refs", STAMP))
        return items  # type: ignore[no-any-return]

    def _thread_damage(self, thread_id: str, bad: Bad) -> None:
        error = self._corrupt(thread_id, bad)
        if not self.fallback:
            raise error
        log.warning("%s; reading what is intact (on_corrupt='fallback')", error)

    def _corrupt(
        self, thread_id: str, bad: Bad, ns: str | None = None, checkpoint_id: str | None = None
    ) -> CorruptCheckpointError:
        """``bad`` placed in the thread (and checkpoint), as the error a read raises."""
        return corrupt(damage(bad, self.named(thread_id), thread_id, ns, checkpoint_id))

    def _skip(self, error: CorruptCheckpointError) -> None:
        """Log a damaged checkpoint that a listing skips (``on_corrupt="fallback"``), or
        raise it."""
        if not self.fallback:
            raise error
        log.warning("%s; skipped (on_corrupt='fallback')", error)

    def _place(self, thread_id: str, ref: bytes) -> tuple[str, str]:
        """The namespace and checkpoint id of ``ref`` (an index member)."""
        try:
            ns, checkpoint_id, rest = split_ordered(ref)
        except ValueError:
            rest = "?"
        if rest:
            bad = Bad("an index member is not a checkpoint reference", "index", "ns", ref)
            raise self._corrupt(thread_id, bad) from None
        return ns, checkpoint_id

    def _record(self, thread_id: str, item: Item) -> Record:
        """The record of an item (which has one), checked."""
        ns, checkpoint_id = self._place(thread_id, item[0])
        try:
            return Record.parse(item[1], item[0])
        except Bad as bad:
            raise self._corrupt(thread_id, bad, ns, checkpoint_id) from None

    def _load_item(
        self, serde: SerializerProtocol, thread_id: str, item: Item, payloads: Payloads
    ) -> CheckpointTuple | None:
        """The checkpoint of a READ item (read with ``"f"``); ``None`` if it does not exist.

        Raises:
            CorruptCheckpointError: it, one of its values or writes is damaged or missing.
            SerializationError: ``serde`` cannot read an intact payload (another serde).
        """
        ref, data = item[0], item[1]
        ns, checkpoint_id = self._place(thread_id, ref)
        try:
            if data is None:
                if item[4]:
                    reason = "the indexes list it but its record is missing from cp"
                    raise Bad(reason, "checkpoint", "cp", ref)
                return None
            return self._assemble(serde, thread_id, (ns, checkpoint_id), item, payloads)
        except Bad as bad:
            raise self._corrupt(thread_id, bad, ns, checkpoint_id) from None

    def _assemble(
        self,
        serde: SerializerProtocol,
        thread_id: str,
        place: tuple[str, str],
        item: Item,
        payloads: Payloads,
    ) -> CheckpointTuple:
        ns, checkpoint_id = place
        ref, data, values, write_pairs, _, count = item
        record = Record.parse(data, ref)
        checkpoint = checked_checkpoint(serde, record, ref, checkpoint_id)
        if len(values) != record.nload:
            raise Bad("its header cannot be read", "checkpoint", "cp", ref)
        channel_values = {}
        for value_field, links in zip(record.fields[: record.nload], values, strict=True):
            if links:  # [] for a version without a value
                try:
                    channel = split_ordered(value_field)[1]
                except (ValueError, IndexError):
                    raise Bad("it names a bad value field", "checkpoint", "cp", ref) from None
                type_, payload = payloads.payload(value_field, links)
                # remembered bytes: what the next put appends to
                key = (thread_id, ns, channel)
                channel_values[channel] = self.written.recent.load(serde, key, type_, payload)
        checkpoint["channel_values"] = channel_values
        writes = decode_writes(serde, write_pairs, None, count, ref)
        config: RunnableConfig = checkpoint_config(thread_id, ns, checkpoint_id)
        return CheckpointTuple(
            config=config,
            checkpoint=checkpoint,
            metadata=record.metadata,  # type: ignore[arg-type]
            parent_config=(
                checkpoint_config(thread_id, ns, record.parent) if record.parent else None
            ),
            pending_writes=pending(writes),
        )

    def _task_writes(
        self,
        serde: SerializerProtocol,
        thread_id: str,
        item: Item,
        channel: str | None = None,
    ) -> list[TaskWrite]:
        """The writes of a READ item (read with ``"w"`` or ``"f"``), checked."""
        ns, checkpoint_id = self._place(thread_id, item[0])
        try:
            return decode_writes(serde, item[3], channel, item[5], item[0])
        except Bad as bad:
            raise self._corrupt(thread_id, bad, ns, checkpoint_id) from None


def checked_checkpoint(
    serde: SerializerProtocol, record: Record, ref: bytes, checkpoint_id: str
) -> Checkpoint:
    """The checkpoint of a record, decoded. A sealed record that does not decode was
    written with another serde (SerializationError); a layout-1 one is damaged."""
    try:
        checkpoint: Checkpoint = decode(serde, record.type, record.codec, record.checkpoint)
    except SerializationError as exc:
        if record.sealed:
            raise
        raise Bad(f"it cannot be decoded ({exc})", "checkpoint", "cp", ref) from None
    if not isinstance(checkpoint, dict) or checkpoint.get("id") != checkpoint_id:
        raise Bad("it holds another checkpoint than its id says", "checkpoint", "cp", ref)
    return checkpoint

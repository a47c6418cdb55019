"""How the file checkpointer stores and finds channel values.

A ``put`` stores the values of its new versions as *value records* inside its own line of
``checkpoints`` (``"stored"``), so one flushed append commits the checkpoint and its
values together; a record whose bytes exceed :data:`INLINE_LIMIT` keeps them in
``values/<channel>@<version>`` instead, written and flushed before the line. A line's
``"values"`` maps each channel that has a value at the checkpoint's version to the id of
the line holding its record: the line itself, or an earlier one for a channel that did not
change. A record is whole, compressed, or an append delta (see
:mod:`statekeeper._storage.deltas`, which makes those decisions for every backend)
naming its ``base`` version and the line holding it (``base_at``), with the CRC-32 of the
full value. Reading follows a delta's chain down to a full copy; writing re-checks, under
the thread's lock, that a delta's base still holds what the writer remembers, and stores
the full copy otherwise.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper._storage.deltas import PlannedValue, StoredValue, ValuePlanner, rebuild_all
from statekeeper._storage.lineage import walk_chains
from statekeeper._storage.payload import EMPTY
from statekeeper._storage.remembered import MAX_CHAIN, RecentPayloads, Remembered
from statekeeper.backends.file._log.lines import DamagedIndex, Entry
from statekeeper.backends.file._log.view import IndexView
from statekeeper.backends.file._namespace import (
    Damaged,
    Missing,
    Namespace,
    Payload,
    read_record,
)
from statekeeper.checkpointers.records import PreparedPut
from statekeeper.checkpointers.semantics import version_key
from statekeeper.errors import SerializationError

__all__ = [
    "INLINE_LIMIT",
    "NOTHING_KNOWN",
    "Known",
    "Lines",
    "Memo",
    "Placed",
    "Plans",
    "encode_record",
    "lines_of",
    "place_values",
    "plan_values",
    "read_value",
    "record_of",
    "walk",
]

INLINE_LIMIT = 64 * 1024  # stored bytes above which a value gets its own file
Plans = Mapping[str, tuple[Any, PlannedValue]]  # channel -> (version, planned value)
Memo = dict[tuple[str, str], bytes]  # (channel, version key) -> full payload, rebuilt
Lines = Callable[[str], Entry | None]  # a checkpoint id -> its line (deleted ones too)
Record = dict[str, Any]


def plan_values(serde: SerializerProtocol, planner: ValuePlanner, prepared: PreparedPut) -> Plans:
    """How to store each value of ``prepared``'s new versions (see
    :meth:`ValuePlanner.plan_new`); serialising happens here, before any lock.

    Raises:
        SerializationError: a value cannot be stored exactly.
    """
    where, values = (prepared.thread_id, prepared.checkpoint_ns), prepared.values
    return {
        channel: (version, planner.plan_new(serde, (*where, channel), channel, key, values))
        for channel, version, key in prepared.new_versions
    }


def record_of(entry: Entry, channel: str, key: str) -> Record | None:
    """The value record of ``channel`` at the version whose :func:`version_key` is
    ``key`` that ``entry``'s line holds, if any."""
    for record in entry.record["stored"]:
        if (
            isinstance(record, dict)
            and record.get("channel") == channel
            and version_key(record.get("version", "")) == key
        ):
            return record
    return None


# -- writing (under the thread's lock) ---------------------------------------------------


class _Finder:
    """Where a (channel, version) is stored, seen from a new checkpoint: its parent's
    line answers for every version the parent has (LangGraph's case); otherwise the
    lines are read from the newest back until one holds it."""

    def __init__(self, view: IndexView, parent_id: str | None) -> None:
        self.view = view
        self.parent = view.find(parent_id) if parent_id is not None else None

    def locate(self, channel: str, version: Any) -> tuple[str, Record] | None:
        key = version_key(version)
        parent = self.parent
        if parent is not None and not parent.deleted:
            versions = parent.record["channel_versions"]
            if channel in versions and version_key(versions[channel]) == key:
                at = parent.record["values"].get(channel)
                if at is None:
                    return None  # the parent's version has no value
                holder = parent if at == parent.checkpoint_id else self.view.find(at)
                record = record_of(holder, channel, key) if holder is not None else None
                if record is not None:
                    return at, record
        for entry in self._lines():
            if (record := record_of(entry, channel, key)) is not None:
                return entry.checkpoint_id, record
        return None

    def _lines(self) -> Iterator[Entry]:
        below, page = None, 16
        while True:
            entries = self.view.newest(below, page)
            yield from entries
            if len(entries) < page:
                return
            below, page = entries[-1].checkpoint_id, min(page * 4, 1024)


class Placed(NamedTuple):
    """What a new checkpoint's line holds about values, and what to remember once it is
    committed: per channel, the payload a later delta may build on."""

    stored: list[Record]
    values: dict[str, str]
    remember: dict[str, Remembered]


def encode_record(n: Namespace, value: StoredValue, version: Any) -> Record:
    """The record of ``value`` (``version`` as given to ``put``), without base: its bytes
    inline, or, above :data:`INLINE_LIMIT`, in its own file written (not yet flushed by
    directory) here."""
    record: Record = {"channel": value.channel, "version": version, "type": value.type}
    record.update(codec=value.codec, crc=value.crc)
    if len(value.data) > INLINE_LIMIT:
        path = n.value_path(value.channel, version)
        n.write(path, {"kind": "value", "channel": value.channel, "version": version}, [value.data])
        record["file"] = path.name
    else:
        record["data"] = base64.b64encode(value.data).decode("ascii")
    return record


def place_values(n: Namespace, view: IndexView, prepared: PreparedPut, plans: Plans) -> Placed:
    """Prepare the value part of the line of ``prepared``'s checkpoint (the caller holds
    the thread's lock and ``view`` is its ``checkpoints``): records for the planned values
    (large ones written to durable files here), and where every other value is."""
    finder = _Finder(view, prepared.parent_id)
    stored: list[Record] = []
    remember: dict[str, Remembered] = {}
    files = False
    for channel, (version, plan) in plans.items():
        value = plan.stored
        if value.type == EMPTY[0]:
            continue  # a version without a value: nothing to store
        base, fallback = None, False
        if value.base is not None:
            base = finder.locate(channel, json.loads(value.base))
            if base is None or base[1].get("crc") != plan.base_crc:
                # replaced or deleted since it was planned: store the full copy instead
                base, fallback = None, True
                assert plan.fallback is not None
                value = plan.fallback
        record = encode_record(n, value, version)
        if base is not None:
            record.update(base=base[1]["version"], base_at=base[0])
        files = files or "file" in record
        stored.append(record)
        if (remembered := plan.remember_fallback if fallback else plan.remember) is not None:
            remember[channel] = remembered
    if files:  # one flush of values/ for every name this put created
        n.sync(n.values_dir)
    own = {record["channel"] for record in stored}
    checkpoint_id = prepared.checkpoint_id
    values: dict[str, str] = {}
    for channel, version in prepared.channel_versions.items():
        if channel in plans and version_key(plans[channel][0]) == version_key(version):
            if channel in own:
                values[channel] = checkpoint_id
        elif (found := finder.locate(channel, version)) is not None:
            values[channel] = found[0]
    return Placed(stored, values, remember)


# -- reading -------------------------------------------------------------------------------


def _stored(n: Namespace, at: str, record: Record, *, load: bool = True) -> StoredValue:
    """``record`` (held by the line of ``at``) as a StoredValue, its bytes read if ``load``.

    Raises:
        Damaged: the record is malformed, or its file is damaged or another value's.
        FileNotFoundError: its file is missing.
    """
    try:
        channel, version = record["channel"], record["version"]
        data = b""
        if load and "file" in record:
            path = n.values_dir / record["file"]
            meta, blobs = read_record(path, "value")
            if meta.get("channel") != channel or meta.get("version") != version:
                raise Damaged(path, "holds the value of another channel or version")
            data = blobs[0]
        elif load:
            data = base64.b64decode(record["data"], validate=True)
        base = record.get("base")
        return StoredValue(
            channel,
            version_key(version),
            record["type"],
            record["codec"],
            data,
            None if base is None else version_key(base),
            record.get("crc"),
        )
    except (KeyError, IndexError, TypeError, binascii.Error) as exc:
        reason = f"malformed value record in the line of checkpoint {at!r} ({exc!r})"
        raise Damaged(n.index, reason) from None


def _find(n: Namespace, lines: Lines, at: str, channel: str, key: str) -> Record:
    holder = lines(at)
    if holder is None:
        raise Missing(n.index, f"the line of checkpoint {at!r} holding {channel!r} is missing")
    record = record_of(holder, channel, key)
    if record is None:
        reason = f"the line of checkpoint {at!r} holds no value of {channel!r} at {key}"
        raise Damaged(n.index, reason)
    return record


class Known(NamedTuple):
    """Payloads a reader need not rebuild: ``recent``, the newest this process wrote per
    (thread, namespace, channel), and ``memo``, every payload rebuilt earlier in the same
    walk, so that reading the versions of a history newest first rebuilds each one once
    (it is cleared when it grows large). Either may be ``None``."""

    recent: RecentPayloads | None = None
    memo: Memo | None = None


NOTHING_KNOWN = Known()


def read_value(
    n: Namespace,
    lines: Lines,
    at: str,
    channel: str,
    version: Any,
    known: Known = NOTHING_KNOWN,
) -> Payload:
    """The payload of ``channel`` at ``version``, whose record the line of ``at`` holds
    (a delta rebuilt), using what is ``known``.

    Raises:
        FileNotFoundError: a line or file it needs is missing (deleted meanwhile?).
        Damaged: the record, or one in its delta chain, is damaged.
    """
    recent, memo = known
    key = version_key(version)
    record = _find(n, lines, at, channel, key)
    head = _stored(n, at, record, load=False)
    remembered = recent.get((n.thread_id, n.ns, channel)) if recent is not None else None
    if remembered is not None and (remembered.version, remembered.crc) == (key, head.crc):
        return head.type, "", remembered.data  # the newest version this process wrote
    if head.base is None:
        full = _stored(n, at, record)
        return full.type, full.codec, full.data
    memo = {} if memo is None else memo
    if (channel, key) in memo:
        return head.type, "", memo[(channel, key)]
    chain, below = [_stored(n, at, record)], None
    while (base := chain[-1].base) is not None:
        if (below := memo.get((channel, base))) is not None:
            break
        if len(chain) > MAX_CHAIN + 1:
            reason = f"the chain of append deltas of {channel!r} at {key} does not end"
            raise Damaged(n.index, reason)
        base_at = record.get("base_at")
        if not isinstance(base_at, str):
            raise Damaged(n.index, f"the delta of {channel!r} at {key} names no base line")
        record = _find(n, lines, base_at, channel, base)
        chain.append(_stored(n, base_at, record))
    try:
        rebuilt = rebuild_all(chain, below)
    except SerializationError as exc:
        raise Damaged(n.index, str(exc)) from None
    if len(memo) > 4 * MAX_CHAIN:
        memo.clear()  # a newest-first walk only needs the chain it is on
    memo.update(((channel, link.version), data) for link, data in zip(chain, rebuilt, strict=True))
    return head.type, "", rebuilt[0]


def lines_of(view: IndexView, *known: Entry) -> Lines:
    """A :data:`Lines` over ``view``, answering for ``known`` lines without reading."""
    found = {entry.checkpoint_id: entry for entry in known}

    def lines(checkpoint_id: str) -> Entry | None:
        if checkpoint_id not in found:
            try:
                entry = view.find(checkpoint_id)
            except DamagedIndex as damage:  # a line on the way is damaged
                raise Damaged(view.path, str(damage)) from None
            if entry is None:
                return None
            found[checkpoint_id] = entry
        return found[checkpoint_id]

    return lines


def walk(
    n: Namespace, view: IndexView, target: Entry, channels: Sequence[str]
) -> tuple[dict[str, list[str]], dict[str, Payload]]:
    """:func:`walk_chains` from ``target`` along parent links that ``view`` holds;
    returns the chains and the payloads of the seeds."""
    payloads: dict[str, Payload] = {}
    lines = lines_of(view, target)

    def holds_value(ch: str, where: tuple[Any, str | None]) -> bool:
        version, at = where
        if at is None:
            return False
        payloads[ch] = read_value(n, lines, at, ch, version)
        return True

    def ancestors() -> Iterator[tuple[str, dict[str, tuple[Any, str | None]]]]:
        parent = target.parent_id
        while parent is not None and (entry := lines(parent)) is not None and not entry.deleted:
            values = entry.record["values"]
            versions = entry.record["channel_versions"]
            yield parent, {ch: (v, values.get(ch)) for ch, v in versions.items()}
            parent = entry.parent_id

    chains, _ = walk_chains(target.checkpoint_id, ancestors(), channels, holds_value)
    return chains, payloads

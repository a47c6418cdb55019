"""How the file checkpointer reads and writes channel values (``values/`` files).

A value is stored whole, compressed, or as an append delta on an earlier version of the
same channel (see :mod:`statekeeper.checkpointers._deltas`, which makes those decisions
for every backend). A value record's JSON names its ``base`` version when it is a delta,
and the CRC-32 of its full bytes. Reading follows a delta's chain down to a full copy;
writing re-checks, under the thread's lock, that a delta's base still holds what the writer
remembers, and stores the full copy otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper.checkpointers._common import version_key
from statekeeper.checkpointers._deltas import (
    MAX_CHAIN,
    PlannedValue,
    RecentPayloads,
    Remembered,
    StoredValue,
    plan_new_value,
    rebuild_all,
)
from statekeeper.checkpointers._file_index import Entry, IndexView
from statekeeper.checkpointers._file_layout import file_name, value_file_name, version_name
from statekeeper.checkpointers._file_namespace import (
    Damaged,
    Namespace,
    Payload,
    names_in,
    read_record,
    record_names,
)
from statekeeper.checkpointers._lineage import walk_chains
from statekeeper.checkpointers._payload import EMPTY, check_id
from statekeeper.errors import SerializationError

__all__ = [
    "Memo",
    "Plans",
    "check_versions",
    "intact_value",
    "plan_values",
    "read_value",
    "stored_channels",
    "value_bases",
    "walk",
    "write_values",
]

Plans = Mapping[str, tuple[Any, PlannedValue]]  # channel -> (version, planned value)
Memo = dict[tuple[str, str], bytes]  # (channel, version key) -> full payload, rebuilt


def plan_values(
    serde: SerializerProtocol,
    where: tuple[str, str],
    new_versions: Mapping[str, Any],
    values: dict[str, Any],
    recent: RecentPayloads,
    compress: bool,
) -> Plans:
    """How to store each value ``new_versions`` names (see :func:`plan_new_value`), for
    the (thread, namespace) ``where``; serialising happens here, before any lock.

    Raises:
        InvalidIdError: a channel name is not storable.
        SerializationError: a value cannot be stored exactly.
    """
    plans: dict[str, tuple[Any, PlannedValue]] = {}
    for channel, version in new_versions.items():
        channel = check_id(channel, "channel name", allow_empty=True)
        key = (*where, channel)
        plan = plan_new_value(
            serde, key, channel, version_key(version), values, recent=recent, compress=compress
        )
        plans[channel] = (version, plan)
    return plans


def check_versions(*version_maps: Mapping[str, Any]) -> None:
    """Raise SerializationError unless every channel version is JSON (a string or number)."""
    try:
        json.dumps(version_maps, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SerializationError(
            f"channel versions must be strings or numbers (JSON), got {exc}"
        ) from None


def stored_value(n: Namespace, channel: str, version: Any) -> StoredValue:
    """The value record of ``channel`` at ``version`` as stored (versions as JSON keys).

    Raises:
        FileNotFoundError: no value is stored for that version.
        Damaged: the record is damaged, or belongs to another channel or version.
    """
    path = n.value_path(channel, version)
    meta, blobs = read_record(path, "value")
    try:
        if meta["channel"] != channel or version_key(meta["version"]) != version_key(version):
            raise Damaged(path, "holds the value of another channel or version")
        base = meta.get("base")
        return StoredValue(
            channel,
            version_key(version),
            meta["type"],
            meta["codec"],
            blobs[0],
            None if base is None else version_key(base),
            meta.get("crc"),
        )
    except (KeyError, IndexError, TypeError) as exc:
        raise Damaged(path, f"malformed value record ({exc!r})") from None


def read_value(
    n: Namespace,
    channel: str,
    version: Any,
    recent: RecentPayloads | None = None,
    memo: Memo | None = None,
) -> Payload | None:
    """The payload of ``channel`` at ``version`` (a delta rebuilt); None if stored empty.
    ``memo`` keeps every payload rebuilt on the way, so that reading the versions of a
    history newest first rebuilds each one once (it is cleared when it grows large).

    Raises:
        FileNotFoundError: no value is stored for that version.
        Damaged: the record, or one in its delta chain, is damaged or missing.
    """
    wanted = stored_value(n, channel, version)
    if wanted.type == EMPTY[0]:
        return None
    if wanted.base is None:
        return wanted.type, wanted.codec, wanted.data
    memo = {} if memo is None else memo
    remembered = recent.get((n.thread_id, n.ns, channel)) if recent is not None else None
    if remembered is not None and (remembered.version, remembered.crc) == (
        wanted.version,
        wanted.crc,
    ):  # the newest version this process wrote, still as it wrote it
        return wanted.type, "", remembered.data
    if (channel, wanted.version) in memo:
        return wanted.type, "", memo[(channel, wanted.version)]
    path, chain, below = n.value_path(channel, version), [wanted], None
    while (base := chain[-1].base) is not None:
        if (below := memo.get((channel, base))) is not None:
            break
        if len(chain) > MAX_CHAIN + 1:
            raise Damaged(path, "its chain of append deltas is longer than any writer makes")
        try:
            chain.append(stored_value(n, channel, json.loads(base)))
        except FileNotFoundError:
            raise Damaged(path, f"the base version {base} of its delta is missing") from None
    try:
        rebuilt = rebuild_all(chain, below)
    except SerializationError as exc:
        raise Damaged(path, str(exc)) from None
    if len(memo) > 4 * MAX_CHAIN:
        memo.clear()  # a newest-first walk only needs the chain it is on
    memo.update(((channel, link.version), data) for link, data in zip(chain, rebuilt, strict=True))
    return wanted.type, "", rebuilt[0]


def write_values(n: Namespace, plans: Plans, recent: RecentPayloads) -> dict[str, Remembered]:
    """Write planned values durably (the caller holds the thread's lock); return, per
    channel, the payload to remember once the checkpoint is committed: the delta's, or,
    if its base changed since it was planned (another process rewrote or deleted it),
    the full copy's, which is then stored instead."""
    remember: dict[str, Remembered] = {}
    wrote = False
    for channel, (version, plan) in plans.items():
        path = n.value_path(channel, version)
        value = plan.stored
        if value.type == EMPTY[0] and not path.exists():
            continue  # a version without a value: nothing to store, nothing to replace
        fallback = False
        if value.base is not None:
            try:
                base = stored_value(n, channel, json.loads(value.base))
                fallback = base.crc != plan.base_crc
            except (FileNotFoundError, Damaged):
                fallback = True
            if fallback:
                assert plan.fallback is not None
                value = plan.fallback
        _detach_dependents(n, channel, version, value, recent)
        meta: dict[str, Any] = {"kind": "value", "channel": channel, "version": version}
        meta.update(type=value.type, codec=value.codec, crc=value.crc)
        if value.base is not None:
            meta["base"] = json.loads(value.base)
        n.write(path, meta, [value.data])
        wrote = True
        if (remembered := plan.remember_fallback if fallback else plan.remember) is not None:
            remember[channel] = remembered
    if wrote:  # one flush of values/ for every name this put created
        n.sync(n.values_dir)
    return remember


def stored_channels(n: Namespace, versions: Mapping[str, Any], plans: Plans) -> list[str]:
    """The channels of ``versions`` (a new checkpoint's) that have a stored value at their
    version, once ``plans`` are written: what the checkpoint's ``values`` lists."""

    def has_value(channel: str, version: Any) -> bool:
        if channel in plans and version_key(plans[channel][0]) == version_key(version):
            return plans[channel][1].stored.type != EMPTY[0]
        return n.value_path(channel, version).exists()

    return [channel for channel, version in versions.items() if has_value(channel, version)]


def value_bases(n: Namespace) -> tuple[list[tuple[str, str]], dict[tuple[str, str], str]]:
    """The ``(channel, version)`` file names in ``values/`` that garbage collection may
    consider, and the base of each delta among them (it must keep the bases survivors
    need). Only the JSON line of each record is read here, so a file whose line cannot be
    read is left out; collection then deletes only what :func:`intact_value` accepts."""
    stored: list[tuple[str, str]] = []
    bases: dict[tuple[str, str], str] = {}
    for name in record_names(n.values_dir, "value"):
        channel, _, version = name.partition("@")
        try:
            with open(n.values_dir / name, "rb") as file:  # noqa: PTH123 - two lines only
                file.readline()
                base = json.loads(file.readline()).get("base")
        except (OSError, ValueError, AttributeError):
            continue
        stored.append((channel, version))
        if base is not None:
            bases[(channel, version)] = version_name(base)
    return stored, bases


def intact_value(path: Path) -> bool:
    """Whether ``path`` holds an intact value record of its own file name: the only kind
    of file garbage collection deletes (damage is left for verify() to report)."""
    try:
        meta = read_record(path, "value")[0]
        return value_file_name(meta["channel"], meta["version"]) == path.name
    except (FileNotFoundError, Damaged, KeyError, TypeError, AttributeError):
        return False


def _detach_dependents(
    n: Namespace, channel: str, version: Any, value: StoredValue, recent: RecentPayloads
) -> None:
    """Before a stored version is overwritten with other content, store the deltas built
    on it as full copies, so they keep their values (rare: versions are not reused)."""
    try:
        existing = stored_value(n, channel, version)
    except (FileNotFoundError, Damaged):
        return
    if existing.crc == value.crc and existing.type == value.type:
        return
    key = version_key(version)
    prefix = file_name(channel) + "@"
    for name in names_in(n.values_dir):
        if not name.startswith(prefix):
            continue
        try:
            meta = read_record(n.values_dir / name, "value")[0]
            if meta.get("base") is None or version_key(meta["base"]) != key:
                continue
            payload = read_value(n, channel, meta["version"])
        except (Damaged, FileNotFoundError, KeyError):
            continue  # already unreadable: verify() reports it; nothing to preserve
        assert payload is not None
        full = {**meta, "codec": payload[1]}
        del full["base"]
        n.write(n.values_dir / name, full, [payload[2]])
    recent.discard((n.thread_id, n.ns, channel))


def walk(
    n: Namespace, view: IndexView, target: Entry, channels: Sequence[str]
) -> tuple[dict[str, list[str]], dict[str, Payload]]:
    """:func:`walk_chains` from ``target`` along parent links that ``view`` holds;
    returns the chains and the payloads of the seeds."""
    payloads: dict[str, Payload] = {}

    def holds_value(ch: str, version: Any) -> bool:
        try:
            payload = read_value(n, ch, version)
        except FileNotFoundError:
            return False
        if payload is not None:
            payloads[ch] = payload
        return payload is not None

    def ancestors() -> Iterator[tuple[str, dict[str, Any]]]:
        parent = target.parent_id
        while parent is not None and (entry := view.find(parent)) is not None:
            yield parent, entry.record["channel_versions"]
            parent = entry.parent_id

    chains, _ = walk_chains(target.checkpoint_id, ancestors(), channels, holds_value)
    return chains, payloads

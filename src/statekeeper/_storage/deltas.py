"""Append deltas: a list that grew by appending is stored as the bytes it added.

LangGraph re-serialises a whole channel value at every version, so a chat's ``messages``
list costs O(n) bytes per turn and O(n²) per thread. When the new payload is the previous
one's msgpack array with elements appended, a backend stores only the new array header
and the appended bytes, with a reference to the base version; every :data:`MAX_CHAIN`
versions it stores the whole payload again, so a read applies at most that many deltas.

Every stored payload carries the CRC-32 of its full bytes. A writer only diffs against a
base whose stored CRC still matches the bytes it remembers, and a reader checks the CRC
of what it rebuilt, so a replaced or corrupt base is detected, never silently used.
"""

from __future__ import annotations

import threading
import zlib
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper._storage.payload import EMPTY, dumps, ensure_exact, pack, unpack
from statekeeper._storage.serde import check_extensions
from statekeeper.errors import SerializationError

__all__ = [
    "MAX_CHAIN",
    "PlannedValue",
    "RecentPayloads",
    "Remembered",
    "StoredValue",
    "ValuePlanner",
    "append_delta",
    "apply_delta",
    "crc",
    "rebuild",
    "rebuild_all",
]

MAX_CHAIN = 16  # deltas between two full copies: bounds the work of one read


def crc(data: bytes) -> int:
    """CRC-32 of a full payload (what is stored alongside every payload)."""
    return zlib.crc32(data)


def _array_header_length(data: bytes) -> int | None:
    """Length of the msgpack array header ``data`` starts with, or None if not an array."""
    if not data:
        return None
    first = data[0]
    if 0x90 <= first <= 0x9F:  # fixarray
        return 1
    if first == 0xDC:  # array 16
        return 3
    if first == 0xDD:  # array 32
        return 5
    return None


def append_delta(base: bytes, new: bytes) -> bytes | None:
    """The delta that turns ``base`` into ``new``, if ``new`` is ``base``'s msgpack array
    with elements appended; otherwise ``None``. msgpack decodes element by element, so a
    byte-equal prefix of elements means the same leading elements."""
    base_header = _array_header_length(base)
    new_header = _array_header_length(new)
    if base_header is None or new_header is None:
        return None
    body = len(base) - base_header
    if len(new) - new_header < body:
        return None
    if not new.startswith(memoryview(base)[base_header:], new_header):
        return None
    return bytes([new_header]) + new[:new_header] + new[new_header + body :]


def apply_delta(base: bytes, delta: bytes) -> bytes:
    """Inverse of :func:`append_delta`.

    Raises:
        SerializationError: ``base`` is not a msgpack array or ``delta`` is malformed.
    """
    base_header = _array_header_length(base)
    if base_header is None or not delta or len(delta) < 1 + delta[0]:
        raise SerializationError("a stored delta or its base payload is corrupt")
    new_header = delta[0]
    return delta[1 : 1 + new_header] + base[base_header:] + delta[1 + new_header :]


@dataclass(frozen=True, slots=True)
class Remembered:
    """A payload this process wrote: its version, full bytes, CRC and delta depth."""

    version: str
    data: bytes
    crc: int
    depth: int  # 0 for a full copy, else the number of deltas back to one


class RecentPayloads:
    """The last delta-able payload written per key (thread, namespace, channel), bounded
    to ``max_bytes`` in total (least recently used first out). Thread-safe."""

    def __init__(self, max_bytes: int = 32 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Hashable, Remembered] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Remembered | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def put(self, key: Hashable, entry: Remembered) -> None:
        if len(entry.data) > self.max_bytes:
            self.discard(key)
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._size -= len(old.data)
            self._entries[key] = entry
            self._size += len(entry.data)
            while self._size > self.max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self._size -= len(evicted.data)

    def discard(self, key: Hashable) -> None:
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._size -= len(old.data)


@dataclass(frozen=True, slots=True)
class StoredValue:
    """One channel value as a backend stores it. ``codec`` is ``""`` or ``"zlib"`` for a
    full copy, ``"append"`` for a delta on ``base`` (a version of the same channel)."""

    channel: str
    version: str
    type: str
    codec: str
    data: bytes
    base: str | None = None
    crc: int | None = None


@dataclass(frozen=True, slots=True)
class PlannedValue:
    """A value about to be stored. When ``stored`` is a delta, the writer must check, in
    the write transaction, that its base still has ``base_crc`` — else store ``fallback``
    (the full copy). After the write, remember ``remember`` (or ``remember_fallback``)."""

    stored: StoredValue
    fallback: StoredValue | None = None
    base_crc: int | None = None
    remember: Remembered | None = None
    remember_fallback: Remembered | None = None


@dataclass(frozen=True, slots=True)
class ValuePlanner:
    """How one checkpointer decides to store channel values: as deltas on the payloads
    it wrote last (``recent``, shared with its reads), else whole — zlib-compressed when
    ``compress`` and the value is not a list that later deltas build on. ``serde`` is
    passed to each call: LangGraph's ``with_allowlist`` clones a saver (sharing this
    planner) with another serializer."""

    recent: RecentPayloads
    compress: bool = True

    def plan(
        self, serde: SerializerProtocol, key: Hashable, channel: str, version: str, value: Any
    ) -> PlannedValue:
        """Serialise ``value`` and decide how to store it: as a delta on the payload last
        remembered under ``key`` (thread, namespace, channel) when it extends it, else
        whole.

        Raises:
            SerializationError: ``serde`` cannot encode ``value``, or would alter it.
        """
        type_, raw = dumps(serde, value)
        checksum = crc(raw)
        is_array = type_ == "msgpack" and _array_header_length(raw) is not None
        codec, data = pack(raw, compress=self.compress and not is_array)
        full = StoredValue(channel, version, type_, codec, data, crc=checksum)
        if not is_array:
            ensure_exact(value, type_, raw)
            check_extensions(value, type_, raw)
            return PlannedValue(full)
        whole = Remembered(version, raw, checksum, 0)
        previous = self.recent.get(key)
        if previous is not None and previous.depth < MAX_CHAIN and previous.version != version:
            delta = append_delta(previous.data, raw)
            if delta is not None:
                # The base's elements were checked when it was written: check the new ones.
                added = value[_element_count(previous.data) :] if isinstance(value, list) else value
                ensure_exact(added, type_, delta)
                # the appended elements, after the delta's copy of the new array header
                new = _element_count(raw) - _element_count(previous.data)
                check_extensions(added, type_, delta[1 + delta[0] :], elements=new)
                return PlannedValue(
                    StoredValue(
                        channel, version, type_, "append", delta, previous.version, checksum
                    ),
                    fallback=full,
                    base_crc=previous.crc,
                    remember=Remembered(version, raw, checksum, previous.depth + 1),
                    remember_fallback=whole,
                )
        ensure_exact(value, type_, raw)
        check_extensions(value, type_, raw)
        return PlannedValue(full, remember=whole, remember_fallback=whole)

    def plan_new(
        self,
        serde: SerializerProtocol,
        key: Hashable,
        channel: str,
        version: str,
        values: Mapping[str, Any],
    ) -> PlannedValue:
        """Plan the value of a channel named in a ``put``'s ``new_versions``: the ``empty``
        marker when the checkpoint carries no value for it (a consumed channel, a
        ``DeltaChannel`` step), else :meth:`plan` of ``values[channel]``."""
        if channel not in values:
            return PlannedValue(StoredValue(channel, version, *EMPTY))
        return self.plan(serde, key, channel, version, values[channel])


def rebuild(chain: Sequence[StoredValue]) -> bytes:
    """The full payload of ``chain[0]``, given its delta chain down to a full copy
    (``chain[-1]``), nearest base first; checked against the stored CRC.

    Raises:
        SerializationError: a payload in the chain is corrupt.
    """
    return rebuild_all(chain)[0]


def rebuild_all(chain: Sequence[StoredValue], below: bytes | None = None) -> list[bytes]:
    """The full payload of every value in ``chain`` (same order), given the delta chain of
    ``chain[0]`` nearest base first, down to either a full copy (``chain[-1]``) or, when
    ``below`` is given, the value whose full payload ``below`` is (the base of
    ``chain[-1]``, already rebuilt). Each payload is checked against its stored CRC.

    Raises:
        SerializationError: a payload in the chain is corrupt.
    """
    links = list(chain)
    rebuilt: list[bytes] = []
    if below is None:  # the chain ends in a full copy
        full = links.pop()
        below = _checked(full, unpack(full.codec, full.data))
        rebuilt.append(below)
    data = below
    for link in reversed(links):
        data = _checked(link, apply_delta(data, link.data))
        rebuilt.append(data)
    return rebuilt[::-1]


def _checked(value: StoredValue, data: bytes) -> bytes:
    if value.crc is not None and crc(data) != value.crc:
        raise SerializationError(
            f"the stored value of channel {value.channel!r} at version {value.version} is "
            "corrupt (checksum mismatch); restore the database from a backup"
        )
    return data


def _element_count(data: bytes) -> int:
    first = data[0]
    if first == 0xDC:
        return int.from_bytes(data[1:3], "big")
    if first == 0xDD:
        return int.from_bytes(data[1:5], "big")
    return first & 0x0F

"""Append deltas: a list that grew by appending is stored as the bytes it added.

LangGraph hands a checkpointer the whole value of every channel that changed, so a chat's
``messages`` list would cost O(n) to serialise and O(n) bytes at every turn, O(n²) per
thread. Instead, when the new value is the previous one with elements appended, a backend
stores a *delta*: the new msgpack array header and the appended elements' bytes, with a
reference to a *base* version of the same channel.

What a put costs. The planner remembers, per (thread, namespace, channel), the last list
it stored: its elements (the objects themselves) and their bytes. When the new list starts
with those very objects (``is``, not ``==``: LangGraph's reducers, ``add_messages``
included, build a new list around the same element objects), only the appended elements
are serialised, and the stored checksum is combined from the parts (:mod:`.crc`): a put
costs O(new data) plus a pointer comparison per element. Otherwise the whole value is
serialised and compared byte for byte with the remembered payload (still a delta when it
is an append), else stored whole. An element changed *in place* (same object, new
content) after it was stored is not seen by the identity check; LangGraph never does
that, and a node that must edit a message returns a replacement (same id), which
``add_messages`` swaps in as a new object.

Which base (skip-deltas, as Subversion's FSFS stores file revisions). Counting the
versions built on a full copy 0, 1, 2, ..., version ``k``'s delta is based on ``k`` less
the place value of its lowest nonzero base-4 digit (7 on 6, 8 on 4, 20 on 16, 16 on 0).
Reading version ``k`` applies as many deltas as ``k`` has base-4 digit sum — 16 at most,
so a read never walks a long chain — while each element is stored about
0.75·log4(k) times in all, never in a periodic full copy of a long list. A full copy is
stored again only when the list is not an append, when the next delta would make a
chain longer than :data:`MAX_CHAIN` (after about 3,000 versions), or when nothing is
remembered (another process, or after eviction from :class:`RecentPayloads`). Deltas and
full copies are zlib-compressed like any other payload.

Every stored payload carries the CRC-32 of its full bytes. A writer only builds on a base
whose stored CRC still matches the one it remembers (checked in the write transaction,
else it stores the full copy), and a reader checks the CRC of what it rebuilt, so a
replaced or corrupt base is detected, never silently used.
"""

from __future__ import annotations

import operator
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper._storage.crc import crc32_combine
from statekeeper._storage.payload import EMPTY, dumps, ensure_exact, pack, unpack
from statekeeper._storage.serde import array_header, check_extensions
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

MAX_CHAIN = 16  # the most deltas a read applies
SKIP_RADIX = 4  # bases at places of base-4 digits: fewer copies than 2, chains within 16
APPEND = "append"  # a delta's codec: "append", or "append+zlib" when its bytes are compressed


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


def _element_count(data: bytes) -> int:
    first = data[0]
    if first == 0xDC:
        return int.from_bytes(data[1:3], "big")
    if first == 0xDD:
        return int.from_bytes(data[1:5], "big")
    return first & 0x0F


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
class Rung:
    """A stored version a later delta may be based on: ``pos`` is its place in the skip
    sequence since the full copy it builds on (0 for that copy); its payload is the array
    header of ``count`` elements and the first ``pieces`` pieces of the remembered body."""

    version: str
    crc: int  # of its full payload
    pos: int
    count: int
    pieces: int


class Remembered:
    """The last list value this process stored under a key: the rungs of its skip path
    (the full copy first, itself last), its body (the elements' bytes) in pieces, their
    running CRC, and — when it was a ``list`` — its elements, to tell an append by
    identity. Immutable; :attr:`data` is its full payload, joined on first use."""

    __slots__ = ("_data", "body_crc", "elements", "path", "pieces", "size")

    def __init__(
        self,
        path: tuple[Rung, ...],
        pieces: tuple[bytes, ...],
        body_crc: int,
        elements: tuple[Any, ...] | None,
        size: int | None = None,
    ) -> None:
        self.path = path
        self.pieces = pieces
        self.body_crc = body_crc  # zlib.crc32 of b"".join(pieces)
        self.size = sum(map(len, pieces)) if size is None else size
        self.elements = elements
        self._data: bytes | None = None

    @classmethod
    def whole(cls, version: str, raw: bytes, checksum: int, elements: Any) -> Remembered:
        """A full copy: the root of a new skip sequence."""
        header = _array_header_length(raw) or 0
        body = raw[header:]
        rung = Rung(version, checksum, 0, _element_count(raw), 1)
        return cls((rung,), (body,), zlib.crc32(body), _snapshot(elements))

    @property
    def version(self) -> str:
        return self.path[-1].version

    @property
    def crc(self) -> int:
        return self.path[-1].crc

    @property
    def count(self) -> int:
        return self.path[-1].count

    @property
    def data(self) -> bytes:
        """The full payload of :attr:`version`."""
        if self._data is None:
            self._data = array_header(self.count) + b"".join(self.pieces)
        return self._data

    def extended(
        self, version: str, piece: bytes, count: int, elements: Any, same: int = 0
    ) -> Remembered:
        """This list with ``piece`` (the encodings of ``count - self.count`` elements)
        appended, stored as version ``version`` on its skip base (see :meth:`delta`);
        ``elements`` is the new list, whose first ``same`` are this one's very objects."""
        pos = self.path[-1].pos + 1
        base_pos = _skip_base(pos)
        body_crc = zlib.crc32(piece, self.body_crc)
        size = self.size + len(piece)
        header = array_header(count)
        checksum = crc32_combine(zlib.crc32(header), body_crc, size)
        rung = Rung(version, checksum, pos, count, len(self.pieces) + 1)
        path = (*(r for r in self.path if r.pos <= base_pos), rung)
        pieces = (*self.pieces, piece)
        return Remembered(path, pieces, body_crc, _snapshot(elements, same), size)

    def can_extend(self) -> bool:
        """Whether the next version's delta stays within :data:`MAX_CHAIN` deltas."""
        base_pos = _skip_base(self.path[-1].pos + 1)
        return sum(1 for r in self.path if 0 < r.pos <= base_pos) < MAX_CHAIN

    def rooted(self) -> Remembered:
        """The same value remembered as a full copy (it was stored whole)."""
        tip = self.path[-1]
        rung = Rung(tip.version, tip.crc, 0, tip.count, len(self.pieces))
        root = Remembered((rung,), self.pieces, self.body_crc, self.elements, self.size)
        root._data = self._data
        return root

    def delta(self) -> tuple[Rung, bytes]:
        """The base and the delta bytes that store :attr:`version` (this value must have
        been :meth:`extended`)."""
        tip, base = self.path[-1], self.path[-2]
        header = array_header(tip.count)
        added = b"".join(self.pieces[base.pieces :])
        return base, bytes([len(header)]) + header + added


def _skip_base(pos: int) -> int:
    """The place in a skip sequence that the version at ``pos`` (> 0) builds on: ``pos``
    less the place value of its lowest nonzero base-:data:`SKIP_RADIX` digit."""
    place = 1
    while pos % (place * SKIP_RADIX) == 0:
        place *= SKIP_RADIX
    return pos - place


def _snapshot(elements: Any, checked: int = 0) -> tuple[Any, ...] | None:
    """The elements of a plain ``list``, kept to recognise them later; ``None`` when they
    must be compared by their bytes instead. A list subclass may serialise its slices
    otherwise. And a message without an id is one that LangGraph itself changes in place:
    ``add_messages`` gives every message of its left side that has none a new id. The
    elements before ``checked`` are known to have one."""
    if type(elements) is not list:
        return None
    if not all(getattr(e, "id", "") is not None for e in elements[checked:]):
        return None
    return tuple(elements)


class RecentPayloads:
    """The last delta-able payload written per key (thread, namespace, channel), bounded
    to ``max_bytes`` of payload in total (least recently used first out). Thread-safe."""

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
        if entry.size > self.max_bytes:
            self.discard(key)
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._size -= old.size
            self._entries[key] = entry
            self._size += entry.size
            while self._size > self.max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self._size -= evicted.size

    def discard(self, key: Hashable) -> None:
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._size -= old.size

    def adopt(self, key: Hashable, data: bytes, value: Any) -> None:
        """Learn the elements a read decoded: when ``data`` is the very payload object
        remembered under ``key`` (the read was served from this memory, so ``value``
        was decoded from exactly these bytes), remember ``value``'s elements, so that a
        put of a list built around them (LangGraph's next step, after ``get_tuple``)
        serialises only what it appends. Anything else leaves the memory as it is."""
        with self._lock:
            entry = self._entries.get(key)
        if entry is None or entry._data is not data or type(value) is not list:
            return
        elements = _snapshot(value)
        if elements is None or len(elements) != entry.count:
            return
        adopted = Remembered(entry.path, entry.pieces, entry.body_crc, elements, entry.size)
        adopted._data = data
        with self._lock:
            if self._entries.get(key) is entry:  # not replaced meanwhile
                self._entries[key] = adopted


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


class PlannedValue:
    """A value about to be stored. When ``stored`` is a delta, the writer must check, in
    the write transaction, that its base still has ``base_crc`` — else store
    :attr:`fallback`, the full copy. After the write, remember ``remember`` (or
    :attr:`remember_fallback`). Both fallbacks are built only when asked for: a delta
    whose base changed is rare, and building them costs a pass over the whole value."""

    __slots__ = ("_made", "_whole", "base_crc", "remember", "stored")

    def __init__(
        self,
        stored: StoredValue,
        whole: Callable[[], tuple[StoredValue, Remembered | None]] | None = None,
        base_crc: int | None = None,
        remember: Remembered | None = None,
    ) -> None:
        self.stored = stored
        self._whole = whole  # the full copy and what to remember when it is stored
        self._made: tuple[StoredValue, Remembered | None] | None = None
        self.base_crc = base_crc
        self.remember = remember

    @classmethod
    def whole(cls, stored: StoredValue, remember: Remembered | None = None) -> PlannedValue:
        """A value stored whole (no base to check): its fallback is itself."""
        return cls(stored, lambda: (stored, remember), None, remember)

    def _fallbacks(self) -> tuple[StoredValue, Remembered | None] | None:
        if self._made is None and self._whole is not None:
            self._made = self._whole()
        return self._made

    @property
    def fallback(self) -> StoredValue | None:
        """The full copy to store instead of a delta whose base changed."""
        made = self._fallbacks()
        return None if made is None else made[0]

    @property
    def remember_fallback(self) -> Remembered | None:
        """What to remember once :attr:`fallback` was stored instead."""
        made = self._fallbacks()
        return None if made is None else made[1]


@dataclass(frozen=True, slots=True)
class ValuePlanner:
    """How one checkpointer decides to store channel values: as deltas on the payloads
    it wrote last (``recent``, shared with its reads), else whole; zlib-compressed when
    ``compress`` (and it saves space, see :func:`~.payload.pack`). ``serde`` is
    passed to each call: LangGraph's ``with_allowlist`` clones a saver (sharing this
    planner) with another serializer."""

    recent: RecentPayloads
    compress: bool = True

    def plan(
        self, serde: SerializerProtocol, key: Hashable, channel: str, version: str, value: Any
    ) -> PlannedValue:
        """Serialise what ``value`` adds and decide how to store it: as a delta when it
        extends the payload last remembered under ``key`` (thread, namespace, channel),
        else whole.

        Raises:
            SerializationError: ``serde`` cannot encode ``value``, or would alter it.
        """
        previous = self.recent.get(key)
        if previous is not None and previous.version == version:
            previous = None  # the same version stored again: never a delta on itself
        if previous is not None and not previous.can_extend():
            previous = None  # the skip sequence is at its end: start a new one
        if previous is not None and previous.elements is not None:
            planned = self._plan_appended(serde, previous, channel, version, value)
            if planned is not None:
                return planned
        type_, raw = dumps(serde, value)
        checksum = crc(raw)
        is_array = type_ == "msgpack" and _array_header_length(raw) is not None

        def whole() -> tuple[StoredValue, Remembered | None]:
            codec, data = pack(raw, compress=self.compress)
            full = StoredValue(channel, version, type_, codec, data, crc=checksum)
            return full, Remembered.whole(version, raw, checksum, value) if is_array else None

        if is_array and previous is not None:
            delta = append_delta(previous.data, raw)
            if delta is not None:
                # The base's elements were checked when it was written: check the new ones.
                old = previous.count
                added = value[old:] if isinstance(value, list) else value
                piece = delta[1 + delta[0] :]
                ensure_exact(added, type_, piece)
                check_extensions(added, type_, piece, elements=_element_count(raw) - old)
                grown = previous.extended(version, piece, _element_count(raw), value)
                return self._delta(channel, type_, grown, whole)
        ensure_exact(value, type_, raw)
        check_extensions(value, type_, raw)
        full, remembered = whole()
        return PlannedValue.whole(full, remembered)

    def _plan_appended(
        self,
        serde: SerializerProtocol,
        previous: Remembered,
        channel: str,
        version: str,
        value: Any,
    ) -> PlannedValue | None:
        """The delta of a plain list that starts with ``previous``'s very elements,
        serialising only the ones appended; ``None`` when it does not."""
        known = previous.elements
        assert known is not None
        if type(value) is not list or len(value) < len(known):
            return None
        if not all(map(operator.is_, value, known)):
            return None
        added = value[len(known) :]
        type_, encoded = dumps(serde, added)
        header = _array_header_length(encoded) if type_ == "msgpack" else None
        if header is None:
            return None  # the serde writes this list otherwise (encrypted...): store whole
        piece = encoded[header:]
        ensure_exact(added, type_, piece)
        check_extensions(added, type_, piece, elements=len(added))
        grown = previous.extended(version, piece, len(value), value, len(known))

        def whole() -> tuple[StoredValue, Remembered | None]:
            codec, data = pack(grown.data, compress=self.compress)
            full = StoredValue(channel, version, type_, codec, data, crc=grown.crc)
            return full, grown.rooted()

        return self._delta(channel, type_, grown, whole)

    def _delta(
        self,
        channel: str,
        type_: str,
        grown: Remembered,
        whole: Callable[[], tuple[StoredValue, Remembered | None]],
    ) -> PlannedValue:
        base, delta = grown.delta()
        codec, data = pack(delta, compress=self.compress)
        codec = APPEND + ("+" + codec if codec else "")
        stored = StoredValue(channel, grown.version, type_, codec, data, base.version, grown.crc)
        return PlannedValue(stored, whole, base.crc, grown)

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
            return PlannedValue.whole(StoredValue(channel, version, *EMPTY))
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
        delta = unpack(link.codec.removeprefix(APPEND).removeprefix("+"), link.data)
        data = _checked(link, apply_delta(data, delta))
        rebuilt.append(data)
    return rebuilt[::-1]


def _checked(value: StoredValue, data: bytes) -> bytes:
    if value.crc is not None and crc(data) != value.crc:
        raise SerializationError(
            f"the stored value of channel {value.channel!r} at version {value.version} is "
            "corrupt (checksum mismatch); restore the database from a backup"
        )
    return data

"""What a checkpointer remembers of the lists it stored: the base of its next append delta.

Per (thread, namespace, channel) a process keeps the last list it stored or read
(:class:`Remembered`): its elements — the objects themselves, to tell an append by
identity — their bytes in pieces with a running CRC, and the *skip path* of versions the
next delta may be based on. Counting the versions built on a full copy 0, 1, 2, ...,
version ``k`` is based on ``k`` less the place value of its lowest nonzero base-4 digit
(7 on 6, 8 on 4, 20 on 16, 16 on 0): a read applies as many deltas as ``k``'s base-4
digits add up to, at most :data:`MAX_CHAIN`, and each element is stored about 0.75·log4(k)
times in all. :class:`RecentPayloads` bounds what is kept, least recently used first out.
:mod:`.deltas` plans the deltas with it.
"""

from __future__ import annotations

import threading
import zlib
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper._storage.crc import crc32_combine
from statekeeper._storage.payload import loads
from statekeeper._storage.serde import array_header, array_header_length, element_count

__all__ = ["MAX_CHAIN", "SKIP_RADIX", "RecentPayloads", "Remembered", "Rung"]

MAX_CHAIN = 16  # the most deltas a read applies
SKIP_RADIX = 4  # bases at places of base-4 digits: fewer copies than 2, chains within 16


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
        header = array_header_length(raw) or 0
        body = raw[header:]
        rung = Rung(version, checksum, 0, element_count(raw), 1)
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
    elements before ``checked`` are known to have one. Nor is a list holding ``None``
    kept: a reader that leaves objects unbuilt (:func:`~.serde.skeleton_reader`) reads
    them as ``None``, and a later list with ``None`` there must not pass for this one."""
    if type(elements) is not list:
        return None
    if not all(e is not None and getattr(e, "id", "") is not None for e in elements[checked:]):
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

    def load(self, serde: SerializerProtocol, key: Hashable, type_: str, data: bytes) -> Any:
        """The value of a payload a read found under ``key``. When ``data`` is the very
        payload object remembered there (the read was served from this memory), the
        value is decoded from exactly the bytes this process wrote, so the depth check of
        :func:`~.payload.loads`, done when they were written, is not done again; and its
        elements are remembered, so that a put of a list built around them (LangGraph's
        next step, after ``get_tuple``) serialises only what it appends."""
        with self._lock:
            entry = self._entries.get(key)
        ours = entry is not None and entry._data is data
        value = loads(serde, type_, data, checked=ours)
        if ours:
            assert entry is not None
            self._adopt(key, entry, value)
        return value

    def _adopt(self, key: Hashable, entry: Remembered, value: Any) -> None:
        if type(value) is not list:
            return
        elements = _snapshot(value)
        if elements is None or len(elements) != entry.count:
            return
        adopted = Remembered(entry.path, entry.pieces, entry.body_crc, elements, entry.size)
        adopted._data = entry._data
        with self._lock:
            if self._entries.get(key) is entry:  # not replaced meanwhile
                self._entries[key] = adopted

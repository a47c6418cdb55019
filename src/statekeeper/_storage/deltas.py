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

Which base: skip-deltas, as Subversion's FSFS stores file revisions (see
:mod:`.remembered`): a read applies at most ``MAX_CHAIN`` deltas, and no long list is
copied whole every few versions. A full copy is stored again only when the list is not
an append, when the next delta would make a chain longer than ``MAX_CHAIN`` (after about
3,000 versions), or when nothing is remembered (another process, or after eviction from
:class:`~.remembered.RecentPayloads`). Deltas and full copies are zlib-compressed like
any other payload.

Every stored payload carries the CRC-32 of its full bytes. A writer only builds on a base
whose stored CRC still matches the one it remembers (checked in the write transaction,
else it stores the full copy), and a reader checks the CRC of what it rebuilt, so a
replaced or corrupt base is detected, never silently used.
"""

from __future__ import annotations

import operator
import zlib
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper._storage.payload import (
    COMPRESS_MIN_BYTES,
    EMPTY,
    dumps,
    ensure_exact,
    pack,
    unpack,
)
from statekeeper._storage.remembered import RecentPayloads, Remembered
from statekeeper._storage.serde import array_header_length, check_extensions, element_count
from statekeeper.errors import SerializationError

__all__ = [
    "APPEND",
    "PlannedValue",
    "StoredValue",
    "ValuePlanner",
    "append_delta",
    "apply_delta",
    "crc",
    "rebuild",
    "rebuild_all",
]

APPEND = "append"  # a delta's codec: "append", or "append+zlib" when its bytes are compressed


def crc(data: bytes) -> int:
    """CRC-32 of a full payload (what is stored alongside every payload)."""
    return zlib.crc32(data)


def append_delta(base: bytes, new: bytes) -> bytes | None:
    """The delta that turns ``base`` into ``new``, if ``new`` is ``base``'s msgpack array
    with elements appended; otherwise ``None``. msgpack decodes element by element, so a
    byte-equal prefix of elements means the same leading elements."""
    base_header = array_header_length(base)
    new_header = array_header_length(new)
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
    base_header = array_header_length(base)
    if base_header is None or not delta or len(delta) < 1 + delta[0]:
        raise SerializationError("a stored delta or its base payload is corrupt")
    new_header = delta[0]
    return delta[1 : 1 + new_header] + base[base_header:] + delta[1 + new_header :]


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
    ``compress`` and they have ``min_bytes`` or more (and it saves space, see
    :func:`~.payload.pack`). ``serde`` is passed to each call: LangGraph's
    ``with_allowlist`` clones a saver (sharing this planner) with another serializer."""

    recent: RecentPayloads
    compress: bool = True
    min_bytes: int = COMPRESS_MIN_BYTES

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
        is_array = type_ == "msgpack" and array_header_length(raw) is not None

        def whole() -> tuple[StoredValue, Remembered | None]:
            codec, data = pack(raw, compress=self.compress, min_bytes=self.min_bytes)
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
                check_extensions(added, type_, piece, elements=element_count(raw) - old)
                grown = previous.extended(version, piece, element_count(raw), value)
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
        header = array_header_length(encoded) if type_ == "msgpack" else None
        if header is None:
            return None  # the serde writes this list otherwise (encrypted...): store whole
        piece = encoded[header:]
        ensure_exact(added, type_, piece)
        check_extensions(added, type_, piece, elements=len(added))
        grown = previous.extended(version, piece, len(value), value, len(known))

        def whole() -> tuple[StoredValue, Remembered | None]:
            codec, data = pack(grown.data, compress=self.compress, min_bytes=self.min_bytes)
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
        codec, data = pack(delta, compress=self.compress, min_bytes=self.min_bytes)
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

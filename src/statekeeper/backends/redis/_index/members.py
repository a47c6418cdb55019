"""The indexes across threads: their keys and members. Everything here is pure.

Each index is two sorted sets in the registry's slot holding the same entries in two
orders, every member scored 0 so that ``ZRANGE ... BYLEX`` walks them (``E`` is
:func:`~statekeeper.backends.redis._client.ordered`)::

    <prefix>:{<prefix>:threads}:checkpoints            E(checkpoint id) E(thread) E(ns)
    <prefix>:{<prefix>:threads}:checkpoints:by-thread  E(thread) E(checkpoint id) E(ns)
    <prefix>:{<prefix>:threads}:meta:<key>             E(value) E(checkpoint id) E(thread) E(ns)
    <prefix>:{<prefix>:threads}:meta:<key>:by-thread   E(thread) E(value) E(checkpoint id) E(ns)

The first order is the global listing order (checkpoint id, thread, namespace: walked
backwards, newest first), within one value for a metadata key; the second lists one
thread's entries together, newest first within a value: a filtered listing of a thread
reads it, and whoever removes a thread's entries (a deletion, the registry's sweep of
expired threads) finds them there without reading the thread. The hash
``<prefix>:{<prefix>:threads}:indexed`` holds the declared metadata keys (``0`` while
being built, ``1`` once built) and, under ``:gen``, a generation that every declaration
counts up: a write planned for another generation is refused and planned again.

A metadata value is indexed by :func:`index_text`, its canonical JSON text with equal
numbers written alike, so that the entries of one value are exactly the checkpoints the
filter equality (:func:`~statekeeper.checkpointers.semantics.matches`) can match.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii
from typing import Any

from statekeeper.backends.redis._client import ordered, split_ordered

__all__ = [
    "GENERATION",
    "MAX_TEXT",
    "Declared",
    "Entry",
    "Index",
    "IndexKeys",
    "below_range",
    "entries_of",
    "index_text",
]

END = b"\x00\x01"  # ends every ordered part
GENERATION = b":gen"  # the field of the declared-keys hash holding its generation
MAX_TEXT = 512  # values with longer texts are not indexed (nor looked up: filtered by scan)


@dataclass(frozen=True, slots=True)
class Entry:
    """One checkpoint's entry in an index: its ordered parts (``value`` is ``b""`` in the
    checkpoint index, ``E(text)`` in a metadata key's)."""

    value: bytes
    checkpoint_id: bytes
    thread: bytes
    ns: bytes

    @property
    def order(self) -> bytes:
        """The member in listing order."""
        return self.value + self.checkpoint_id + self.thread + self.ns

    @property
    def by_thread(self) -> bytes:
        """The member in the thread-first order."""
        return self.thread + self.value + self.checkpoint_id + self.ns

    @property
    def ref(self) -> bytes:
        """The checkpoint's ref in its thread (``E(ns) E(checkpoint id)``)."""
        return self.ns + self.checkpoint_id

    def thread_id(self) -> str:
        """The thread id.

        Raises:
            ValueError: the member is damaged (not UTF-8).
        """
        return split_ordered(self.thread)[0]


@dataclass(frozen=True, slots=True)
class Index:
    """One index across threads: its two sorted sets (see the module docstring); ``key``
    is the metadata key, ``None`` for the checkpoint index."""

    key: str | None
    order: bytes
    by_thread: bytes

    def parse(self, member: bytes) -> Entry | None:
        """The entry a member of :attr:`order` names; ``None`` for a damaged member."""
        parts = _parts(member, 3 if self.key is None else 4)
        if parts is None:
            return None
        if self.key is None:
            return Entry(b"", *parts)
        value, checkpoint_id, thread, ns = parts
        return Entry(value, checkpoint_id, thread, ns)

    def parse_by_thread(self, member: bytes) -> Entry | None:
        """The entry a member of :attr:`by_thread` names; ``None`` for a damaged member."""
        parts = _parts(member, 3 if self.key is None else 4)
        if parts is None:
            return None
        if self.key is None:
            thread, checkpoint_id, ns = parts
            return Entry(b"", checkpoint_id, thread, ns)
        thread, value, checkpoint_id, ns = parts
        return Entry(value, checkpoint_id, thread, ns)


class IndexKeys:
    """The keys of one prefix's indexes across threads."""

    def __init__(self, prefix: str) -> None:
        slot = f"{prefix}:{{{prefix}:threads}}"
        self._slot = slot
        self.checkpoints = Index(
            None, f"{slot}:checkpoints".encode(), f"{slot}:checkpoints:by-thread".encode()
        )
        self.indexed = f"{slot}:indexed".encode()  # the declared metadata keys (a hash)

    def meta(self, key: str) -> Index:
        """The index of a metadata key (a checked name: letters, digits and ``_``)."""
        name = f"{self._slot}:meta:{key}"
        return Index(key, name.encode(), f"{name}:by-thread".encode())


@dataclass(frozen=True)
class Declared:
    """The declared metadata keys as read from the prefix: the generation of the hash,
    and each key's state (``True``: built, ready to serve reads; ``False``: being built,
    maintained by every write but not read). Replaced whole, never changed: a put reads
    one and plans against it."""

    generation: bytes = b""
    keys: Mapping[str, bool] = field(default_factory=dict)

    @classmethod
    def parse(cls, fields: Mapping[bytes, bytes]) -> Declared:
        """From the hash's fields (names that are no key are ignored)."""
        keys: dict[str, bool] = {}
        for name, state in fields.items():
            if name != GENERATION and name.isascii():
                keys[name.decode()] = state == b"1"
        return cls(fields.get(GENERATION, b""), keys)

    def ready(self) -> list[str]:
        return [key for key, ready in self.keys.items() if ready]


def index_text(value: Any) -> str | None:
    """The text a metadata value is indexed by: its canonical JSON (sorted keys, ASCII),
    with every number that equals an integer written as that integer (``1`` and ``1.0``:
    ``1``; ``-0.0``: ``0``), so two values have the same text exactly when the filter
    equality holds for them (``True`` stays ``true``, apart from ``1``). ``None`` for a
    value that is not indexed: ``None`` (a filter on it also matches a missing key),
    texts over :data:`MAX_TEXT` characters, and what is no JSON (infinities, objects
    with keys that are no text)."""
    if value is None:
        return None
    try:
        text = _text(value)
    except (TypeError, ValueError, RecursionError):
        return None
    return text if len(text) <= MAX_TEXT else None


def _text(value: Any) -> str:
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("not JSON")
        return str(int(value)) if value.is_integer() else float.__repr__(value)
    if isinstance(value, str):
        return encode_basestring_ascii(value)
    if value is None:
        return "null"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_text(item) for item in value) + "]"
    if isinstance(value, Mapping):
        if not all(isinstance(key, str) for key in value):
            raise TypeError("a key that is no text")
        inner = (encode_basestring_ascii(k) + ":" + _text(value[k]) for k in sorted(value))
        return "{" + ",".join(inner) + "}"
    raise TypeError(f"{type(value).__name__} is not JSON")


def entries_of(
    keys: IndexKeys,
    thread: bytes,
    ref: tuple[bytes, bytes],
    metadata: Mapping[str, Any] | None,
    declared: Iterable[str],
) -> list[tuple[Index, Entry]]:
    """The entries one checkpoint has: in the checkpoint index, and in the index of each
    ``declared`` key whose value in ``metadata`` is indexed (:func:`index_text`).
    ``thread`` is ``E(thread id)``, ``ref`` ``(E(ns), E(checkpoint id))``."""
    ens, checkpoint_id = ref
    found = [(keys.checkpoints, Entry(b"", checkpoint_id, thread, ens))]
    if metadata:
        for key in declared:
            text = index_text(metadata.get(key))
            if text is not None:
                found.append((keys.meta(key), Entry(ordered(text), checkpoint_id, thread, ens)))
    return found


def below_range(prefix: bytes, below: bytes | None) -> tuple[bytes, bytes]:
    """``(high, low)`` for ``ZRANGE key high low BYLEX REV``: the members that start with
    ``prefix`` (complete ordered parts), below ``prefix + below`` when ``below`` (an
    ordered id) is given. Ordered parts never hold the byte ``ff`` (UTF-8 has none), so
    ``prefix + ff`` is above every member that starts with ``prefix``."""
    if below is not None:
        high = b"(" + prefix + below
    else:
        high = b"(" + prefix + b"\xff" if prefix else b"+"
    return high, (b"[" + prefix if prefix else b"-")


def _parts(member: bytes, count: int) -> list[bytes] | None:
    """The ``count`` ordered parts of ``member`` (each with its end), ``None`` unless it
    is exactly that many."""
    parts: list[bytes] = []
    pos = 0
    for _ in range(count):
        end = member.find(END, pos)
        if end < 0:
            return None
        parts.append(member[pos : end + 2])
        pos = end + 2
    return parts if pos == len(member) else None

"""The Redis checkpointer's key layout and byte formats (see ``docs/redis.md``).

Every key of a thread is ``<prefix>:{<tag>}:<name>``, ``<tag>`` being the thread id
percent-encoded (:func:`~._client.tag`), so all of a thread's keys share one Cluster
slot; the names and what they hold are listed in
:mod:`statekeeper.backends.redis._lua`. Inside keys, tuples of ids are concatenations
of :func:`~statekeeper.backends.redis._client.ordered` parts, and stored records and values are
:func:`~statekeeper.backends.redis._client.pack` frames. Everything here is pure.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.base import PendingWrite, writes_sort_key
from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper._storage.deltas import (
    RecentPayloads,
    Remembered,
    StoredValue,
    rebuild_all,
)
from statekeeper._storage.payload import check_id, decode, loads
from statekeeper.backends.redis._client import ordered, split_ordered
from statekeeper.backends.redis._client import tag as tag_of
from statekeeper.backends.redis._client import unpack as unpack_parts
from statekeeper.backends.redis._io import Cmd
from statekeeper.backends.redis._lua import THREAD_KEYS
from statekeeper.checkpointers.base import TaskWrite
from statekeeper.errors import StorageError

__all__ = [
    "END",
    "Item",
    "Layout",
    "Payloads",
    "Record",
    "Written",
    "decode_writes",
    "encode_value",
    "encode_write",
    "first",
    "pending",
    "rank",
    "swap",
    "unstable",
    "value_chains",
    "version_part",
    "version_text",
]

END = b"\x00\x01"  # ends every ordered part
Item = list[Any]  # one READ reply entry: [ref, record | None, value chains, write pairs]
_INVERT = bytes(range(255, -1, -1))
_NAMES = tuple(name.encode() for name in THREAD_KEYS)
_MEMO = 4096  # threads whose tag and key names are kept (a function of the id: never stale)
_FIELD_MEMO = 8192  # value fields kept (a function of namespace, channel, version: never stale)


class Layout:
    """Where one checkpointer's keys are, and the settings every operation needs."""

    def __init__(
        self, prefix: str, ttl_ms: int, refresh_on_read: bool, compress: bool, cluster: bool
    ) -> None:
        self.prefix = prefix
        self.cluster = cluster
        self.ttl_ms = ttl_ms  # 0: keys never expire
        self.refresh_on_read = refresh_on_read
        self.compress = compress
        self.registry = f"{prefix}:threads".encode()  # sorted set: thread tag -> expiry
        self.written = Written()  # this process' last list values: delta bases, known reads
        self._names: dict[str, tuple[str, tuple[bytes, ...]]] = {}
        self._fields: dict[tuple[str, str, str], bytes] = {}

    def _thread(self, thread_id: str) -> tuple[str, tuple[bytes, ...]]:
        names = self._names.get(thread_id)
        if names is None:
            if len(self._names) >= _MEMO:
                self._names.clear()
            tag = tag_of(thread_id)
            base = f"{self.prefix}:{{{tag}}}:".encode()
            names = self._names[thread_id] = (tag, tuple(base + name for name in _NAMES))
        return names

    def value_field(self, ns: str, ens: bytes, channel: Any, version: Any) -> bytes:
        """The field of a channel's value in the ``blobs`` hash: ``ens`` (``ordered(ns)``)
        + the ordered channel name + :func:`version_part`. A function of its arguments,
        so kept for text channels and versions (the usual ones).

        Raises:
            InvalidIdError: the channel name cannot be stored.
        """
        if type(channel) is not str or type(version) is not str:
            name = check_id(channel, "channel name", allow_empty=True)
            return ens + ordered(name) + version_part(version)
        key = (ns, channel, version)
        found = self._fields.get(key)
        if found is None:
            name = check_id(channel, "channel name", allow_empty=True)
            if len(self._fields) >= _FIELD_MEMO:
                self._fields.clear()
            found = self._fields[key] = ens + ordered(name) + version_part(version)
        return found

    def keys(self, thread_id: str) -> tuple[bytes, ...]:
        """The keys of one thread, in ``THREAD_KEYS`` order; all share its hash tag."""
        return self._thread(thread_id)[1]

    def tag(self, thread_id: str) -> str:
        """The thread's tag (:func:`~._client.tag`): its registry member."""
        return self._thread(thread_id)[0]

    def score(self) -> str:
        """The registry score of a thread written now: when its keys expire (ms)."""
        return f"{time.time() * 1000 + self.ttl_ms:.0f}" if self.ttl_ms else "+inf"

    def claim_key(self, thread_id: str) -> bytes:
        """The key of the thread's claim (``claim_thread``), with the thread's hash tag."""
        return f"{self.prefix}:{{{self.tag(thread_id)}}}:claim".encode()

    def touch(self, thread_id: str, *, only_existing: bool = False) -> Cmd:
        """Register the thread (or move its expiry) in the registry of threads."""
        flags = ("XX",) if only_existing else ()
        return Cmd(("ZADD", self.registry, *flags, self.score(), self.tag(thread_id)))


def version_text(version: Any) -> str:
    """A channel version as stored (its JSON text), without ``json.dumps`` for the usual
    versions: text of printable ASCII without quotes or backslashes, or an integer."""
    if type(version) is str and version.isascii() and version.isprintable():
        if '"' not in version and "\\" not in version:
            return f'"{version}"'
    elif type(version) is int:
        return str(version)
    return json.dumps(version)


def version_part(version: Any) -> bytes:
    """The version part of a value field: ``ordered(version_text(version))``."""
    return ordered(version_text(version))


def swap(member: bytes) -> bytes:
    """E(a)E(b) -> E(b)E(a): an ``ids`` member <-> a ref (E(ns)E(checkpoint id))."""
    cut = member.index(END) + 2
    return member[cut:] + member[:cut]


def first(data: bytes) -> bytes:
    """The first ordered part of ``data``, still encoded."""
    return data[: data.index(END) + 2]


def rank(member: bytes, thread_id: str) -> bytes:
    """A key that sorts global listing entries newest first: (checkpoint id, thread id,
    namespace) descending. Ordered parts are prefix-free, so inverting bytes reverses."""
    cut = member.index(END) + 2
    return (member[:cut] + ordered(thread_id) + member[cut:]).translate(_INVERT)


@dataclass
class Record:
    """A checkpoint as the ``cp`` hash holds it: a header Lua reads (the run part, the
    value fields it references, its parent id), then type, codec, metadata JSON and the
    checkpoint itself (through ``serde``, without its channel values)."""

    run: bytes
    fields: list[bytes]
    nload: int
    parent: str | None
    type: str
    codec: str
    metadata: dict[str, Any]
    checkpoint: bytes

    @classmethod
    def parse(cls, data: bytes) -> Record:
        (run, nload, nextra), rest = unpack_parts(data, 3)
        count = int(nload) + int(nextra)
        parts, checkpoint = unpack_parts(rest, count + 4)
        parent, type_, codec, metadata = parts[count:]
        return cls(
            run=run,
            fields=parts[:count],
            nload=int(nload),
            parent=parent.decode() if parent else None,
            type=type_.decode(),
            codec=codec.decode(),
            metadata=json.loads(metadata),
            checkpoint=checkpoint,
        )

    @staticmethod
    def pack(
        run: bytes,
        load: list[bytes],
        extra: list[bytes],
        parent_id: str | None,
        metadata: str,
        checkpoint: tuple[str, str, bytes],
    ) -> bytes:
        """The record of a checkpoint: it loads the values in ``load`` and also holds a
        reference on those in ``extra`` (values it wrote but does not load).
        ``checkpoint`` is ``(type, codec, bytes)`` as
        :func:`~statekeeper._storage.payload.encode` gives it; ``metadata`` its canonical
        JSON."""
        type_, codec, data = checkpoint
        return _framed(
            (
                run,
                b"%d" % len(load),
                b"%d" % len(extra),
                *load,
                *extra,
                parent_id.encode() if parent_id else b"",
                type_.encode(),
                codec.encode(),
                metadata.encode(),
            ),
            data,
        )


def _framed(parts: Sequence[bytes], tail: bytes) -> bytes:
    """``pack(*parts) + tail`` (:func:`~._client.pack`), in one join: the tail
    (a payload, the largest part) is copied once."""
    pieces: list[bytes] = []
    for part in parts:
        pieces += (b"%d:" % len(part), part)
    pieces.append(tail)
    return b"".join(pieces)


def encode_value(ens: bytes, stored: StoredValue) -> bytes:
    """A value as the ``blobs`` hash holds it: type, codec, base field, crc, bytes."""
    base = b"" if stored.base is None else ens + ordered(stored.channel) + ordered(stored.base)
    checksum = b"" if stored.crc is None else b"%d" % stored.crc
    return _framed((stored.type.encode(), stored.codec.encode(), base, checksum), stored.data)


class Written:
    """The value this process wrote last per (thread, namespace, channel) — the next
    version's delta base (:class:`RecentPayloads`) — indexed by thread, so that a read
    can tell the server which values it need not send (the latest, usually)."""

    def __init__(self, max_threads: int = 10_000) -> None:
        self.recent = RecentPayloads()
        self._max_threads = max_threads
        self._channels: OrderedDict[str, set[tuple[str, str]]] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, key: tuple[str, str, str], entry: Remembered | None) -> None:
        thread_id, ns, channel = key
        with self._lock:
            channels = self._channels.setdefault(thread_id, set())
            self._channels.move_to_end(thread_id)
            if entry is None:
                channels.discard((ns, channel))
            else:
                channels.add((ns, channel))
            while len(self._channels) > self._max_threads:
                self._channels.popitem(last=False)
        if entry is None:
            self.recent.discard(key)
        else:
            self.recent.put(key, entry)

    def known(self, thread_id: str, ns: str | None) -> tuple[list[bytes], dict[bytes, bytes]]:
        """``(field, crc, ...)`` for a READ call, and the payloads by field, of the values
        of the thread (in namespace ``ns``, or any) this process holds."""
        with self._lock:
            channels = list(self._channels.get(thread_id, ()))
        args: list[bytes] = []
        data: dict[bytes, bytes] = {}
        for value_ns, channel in channels:
            entry = self.recent.get((thread_id, value_ns, channel))
            if entry is not None and (ns is None or ns == value_ns):
                value_field = ordered(value_ns) + ordered(channel) + ordered(entry.version)
                args += [value_field, b"%d" % entry.crc]
                data[value_field] = entry.data
        return args, data


class Payloads:
    """Rebuilds the values of one READ reply: each version once (the script sends a value
    once per reply and marks its repeats), values the caller holds from memory."""

    def __init__(self, known: dict[bytes, bytes] | None = None) -> None:
        self.known = known or {}
        self.memo: dict[bytes, tuple[str, bytes]] = {}  # value field -> (type, payload)

    def value(self, serde: SerializerProtocol, value_field: bytes, links: Sequence[Any]) -> Any:
        """The value stored under ``value_field``, given its chain from the script (itself,
        then the bases it is a delta on), rebuilt and checked against its CRC."""
        type_, data = self.payload(value_field, links)
        return loads(serde, type_, data)

    def payload(self, value_field: bytes, links: Sequence[Any]) -> tuple[str, bytes]:
        _, channel, _, _ = split_ordered(value_field)
        chain: list[StoredValue] = []
        fields: list[bytes] = []
        below: tuple[str, bytes] | None = None
        at = value_field
        for link in links:
            if isinstance(link, list):  # [field, b"m"]: sent before; [field, b"="]: known
                # only list values (msgpack arrays) are remembered, so known ones are msgpack
                below = self.memo[at] if link[1] == b"m" else ("msgpack", self.known[at])
                break
            (type_, codec, base, checksum), data = unpack_parts(link, 4)
            version = split_ordered(at)[2]
            value = StoredValue(
                channel,
                version,
                type_.decode(),
                codec.decode(),
                data,
                base.decode() or None,
                int(checksum) if checksum else None,
            )
            chain.append(value)
            fields.append(at)
            at = base
        if below is not None:
            self.memo[at] = below
        if chain:
            rebuilt = rebuild_all(chain, below[1] if below is not None else None)
            for at, value, data in zip(fields, chain, rebuilt, strict=True):
                self.memo[at] = (value.type, data)
        return self.memo[value_field]


def decode_writes(
    serde: SerializerProtocol, pairs: Sequence[bytes | None], channel: str | None = None
) -> list[TaskWrite]:
    """Decoded writes from ``[field, value, ...]`` (of ``channel`` only, if given), in
    ``writes_sort_key`` order."""
    rows = []
    for i in range(0, len(pairs), 2):
        write_field, value = pairs[i], pairs[i + 1]
        if write_field is None or value is None:
            continue
        _, _, task_id, idx = split_ordered(write_field)
        (ch, path, type_, codec), payload = unpack_parts(value, 4)
        if channel is None or ch.decode() == channel:
            rows.append((path.decode(), task_id, int(idx), ch.decode(), type_, codec, payload))
    rows.sort(key=lambda r: writes_sort_key(r[0], r[1], r[2]))
    return [
        TaskWrite(task_id, path, ch, decode(serde, t.decode(), c.decode(), payload))
        for path, task_id, _, ch, t, c, payload in rows
    ]


def pending(writes: list[TaskWrite]) -> list[PendingWrite]:
    """``writes`` as ``CheckpointTuple.pending_writes`` holds them (no task path)."""
    return [(w.task_id, w.channel, w.value) for w in writes]


def encode_write(channel: str, task_path: str, type_: str, codec: str, data: bytes) -> bytes:
    """A pending write as the ``writes`` hash holds it (task id and index are in its field)."""
    return _framed((channel.encode(), task_path.encode(), type_.encode(), codec.encode()), data)


def value_chains(items: list[Item]) -> list[list[Any]]:
    """The value chains of READ items, for :meth:`Reads._fill`."""
    return [links for item in items if item[1] for links in item[2]]


def unstable() -> StorageError:
    """What a read raises when its checkpoints keep vanishing between its two calls."""
    return StorageError(
        "checkpoints kept changing while being read (concurrent deletes?); try again"
    )

"""The Redis checkpointer's key layout and byte formats (see ``docs/redis.md``).

Every key of a thread is ``<prefix>:{<tag>}:<name>``, ``<tag>`` being the thread id
percent-encoded (:func:`~._client.tag`), so all of a thread's keys share one Cluster
slot; the names and what they hold are listed in
:mod:`statekeeper.backends.redis._lua`. Inside keys, tuples of ids are concatenations
of :func:`~statekeeper.backends.redis._client.ordered` parts; the stored records are in
:mod:`statekeeper.backends.redis._integrity.records`. Everything here is pure.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from langgraph.checkpoint.base import PendingWrite

from statekeeper._storage.payload import check_id
from statekeeper._storage.remembered import RecentPayloads, Remembered
from statekeeper.backends.redis._client import ordered
from statekeeper.backends.redis._client import tag as tag_of
from statekeeper.backends.redis._index.members import Declared, IndexKeys
from statekeeper.backends.redis._index.scripts import INDEX, REGISTER, UNREGISTER
from statekeeper.backends.redis._integrity.records import head
from statekeeper.backends.redis._io import Cmd, Eval
from statekeeper.backends.redis._lua import THREAD_KEYS
from statekeeper.checkpointers.base import TaskWrite
from statekeeper.errors import StorageError

__all__ = [
    "END",
    "Item",
    "Layout",
    "Written",
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
# one READ reply entry: [ref, record | None, value chains, write pairs, 1 if the ref is
# indexed but has no record (else 0), the count of its writes in refs | None]
Item = list[Any]
_INVERT = bytes(range(255, -1, -1))
_NAMES = tuple(name.encode() for name in THREAD_KEYS)
_MEMO = 4096  # threads whose tag and key names are kept (a function of the id: never stale)
_FIELD_MEMO = 8192  # value fields kept (a function of namespace, channel, version: never stale)


class Layout:
    """Where one checkpointer's keys are, and the settings every operation needs."""

    fallback = False  # on_corrupt="fallback": reads skip damaged checkpoints, logged
    read_only = False  # mode="ro": reads never write (no TTL refresh, no registry sweep)

    def __init__(
        self, prefix: str, ttl_ms: int, refresh_on_read: bool, compress: bool, cluster: bool
    ) -> None:
        self.prefix = prefix
        self.cluster = cluster
        self.ttl_ms = ttl_ms  # 0: keys never expire
        self.refresh_on_read = refresh_on_read
        self.compress = compress
        self.registry = f"{prefix}:threads".encode()  # sorted set: thread tag -> expiry
        # how many members the registry has, in its slot (the hash tag is its name)
        self.counter = f"{prefix}:{{{prefix}:threads}}:count".encode()
        # the thread index, in the registry's slot: a sorted set of E(newest root
        # checkpoint id) E(thread id), and a hash E(thread id) -> its member
        self.heads = f"{prefix}:{{{prefix}:threads}}:heads".encode()
        self.head_of = f"{prefix}:{{{prefix}:threads}}:head".encode()
        self.indexed = True  # False: keys of a layout before the index, opened read-only
        # the indexes across threads (the checkpoint index, declared metadata keys')
        self.across = IndexKeys(prefix)
        self.listed = True  # False: keys of a layout before the checkpoint index, read-only
        self.declared = Declared()  # as last read from the prefix (replaced whole)
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

    def named(self, thread_id: str) -> dict[str, bytes]:
        """The keys of one thread by name (``"cp"`` -> ``<prefix>:{<tag>}:cp``...)."""
        return dict(zip(THREAD_KEYS, self.keys(thread_id), strict=True))

    def tag(self, thread_id: str) -> str:
        """The thread's tag (:func:`~._client.tag`): its registry member."""
        return self._thread(thread_id)[0]

    def score(self) -> str:
        """The registry score of a thread written now: when its keys expire (ms)."""
        return f"{time.time() * 1000 + self.ttl_ms:.0f}" if self.ttl_ms else "+inf"

    def copying_key(self, thread_id: str) -> bytes:
        """The key that says a copy into the thread is being published (its index
        entries are there before its data): readers do not remove them meanwhile."""
        return f"{self.prefix}:{{{self.tag(thread_id)}}}:copying".encode()

    def claim_key(self, thread_id: str) -> bytes:
        """The key of the thread's claim (``claim_thread``), with the thread's hash tag."""
        return f"{self.prefix}:{{{self.tag(thread_id)}}}:claim".encode()

    def touch(self, thread_id: str, *, only_existing: bool = False) -> Cmd | Eval:
        """Register the thread (or move its expiry) in the registry of threads."""
        if only_existing:
            return Cmd(("ZADD", self.registry, "XX", self.score(), self.tag(thread_id)))
        registry = (self.registry, self.counter)
        return Eval(REGISTER, registry, (self.score(), self.tag(thread_id)))

    def untouch(self, thread_id: str) -> Eval:
        """Unregister the thread."""
        return Eval(UNREGISTER, (self.registry, self.counter), (self.tag(thread_id),))

    def index(self, op: str, heads: Sequence[tuple[str, str | None]]) -> Eval:
        """Update the thread index: ``op`` "max" (a put), "set" or "del" for each
        (thread id, newest root checkpoint id; ``None`` for "del")."""
        args: list[bytes | str] = [op]
        for thread_id, checkpoint_id in heads:
            field = ordered(thread_id)
            args += [field, b"" if checkpoint_id is None else ordered(checkpoint_id) + field]
        return Eval(INDEX, (self.heads, self.head_of), tuple(args))


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


def _framed(parts: Sequence[bytes], tail: bytes) -> bytes:
    """``pack(*parts) + tail`` (:func:`~._client.pack`), as layout 1 stored records."""
    return head(parts) + tail


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


def pending(writes: list[TaskWrite]) -> list[PendingWrite]:
    """``writes`` as ``CheckpointTuple.pending_writes`` holds them (no task path)."""
    return [(w.task_id, w.channel, w.value) for w in writes]


def value_chains(items: list[Item]) -> list[list[Any]]:
    """The value chains of READ items, for :meth:`Reads._fill`."""
    return [links for item in items if item[1] for links in item[2]]


def unstable() -> StorageError:
    """What a read raises when its checkpoints keep vanishing between its two calls."""
    return StorageError(
        "checkpoints kept changing while being read (concurrent deletes?); try again"
    )

"""Keeping the indexes across threads (:mod:`.members`) true, in bounded steps:

* entries are removed *after* the data they name: :meth:`Upkeep.unindex_deleted` for
  checkpoints a ``prune`` or ``delete_for_runs`` batch deleted (the script replied which,
  with their metadata), :meth:`Upkeep.unindex_thread` for a deleted or expired thread (its
  entries read from the thread-first sets, a page at a time), each removal in a script
  that keeps any entry that may still be a stored checkpoint's (see ``UNINDEX``);
* the registry's sweep of expired threads (each read-write ``list(None)``) removes the
  entries of at most :data:`SWEEP_ENTRIES` of them per call before it forgets a thread,
  so a later sweep goes on where it stopped;
* builds: the checkpoint index of an older layout (from each thread's ``ids``), a newly
  declared metadata key's index (from each thread's records), a page at a time;
* opening: the layout version checked (and upgraded, building first), the declared keys
  read, declared and built.

Operations are sans-IO generators (:mod:`.._io`), run by the checkpointer's client.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any

from statekeeper.backends.redis import _lua as lua
from statekeeper.backends.redis._client import ordered, untag
from statekeeper.backends.redis._index.members import Declared, Entry, Index, entries_of
from statekeeper.backends.redis._index.scripts import (
    ADD,
    DECLARE,
    EXPIRED,
    FORGET,
    REGISTRY,
    REMOVE_IF,
    UNINDEX,
)
from statekeeper.backends.redis._integrity.records import Record
from statekeeper.backends.redis._integrity.seal import BACKEND, Bad, corrupt, path, wrong_type
from statekeeper.backends.redis._io import Batch, Cmd, Eval, Op
from statekeeper.backends.redis._layout import END
from statekeeper.backends.redis._listing import SCAN, Registry, is_tag
from statekeeper.errors import (
    CorruptCheckpointError,
    Damage,
    ReadOnlyError,
    SchemaVersionError,
    StorageError,
    StorageNotFoundError,
)

__all__ = ["SWEEP_ENTRIES", "Upkeep", "metadata_of", "older", "tolerant_reads"]

SWEEP_ENTRIES = 2_000  # index entries of expired threads one sweep removes at most
ADD_BATCH = 250  # members per ADD call (two arguments each)


class Upkeep(Registry):
    """Index upkeep of one checkpointer (see the module docstring)."""

    # -- which indexes there are -----------------------------------------------------------

    def load_declared(self) -> Op[Declared]:
        """Read the declared metadata keys (and the generation) from the prefix."""
        fields = yield Cmd(("HGETALL", self.across.indexed))
        self.declared = Declared.parse(fields)
        return self.declared

    def indexes(self, declared: Declared | None = None) -> list[Index]:
        """The checkpoint index and the index of every declared key (built or not)."""
        keys = (declared or self.declared).keys
        return [self.across.checkpoints, *(self.across.meta(key) for key in keys)]

    def entries(
        self, thread_id: str, ref: bytes, metadata: Any, declared: Iterable[str]
    ) -> list[tuple[Index, Entry]]:
        """The index entries of the checkpoint ``ref`` of a thread with this metadata (a
        dict, or anything else for none)."""
        if END not in ref:  # no checkpoint's ref (damage, which verify reports)
            return []
        cut = ref.index(END) + 2
        md = metadata if isinstance(metadata, dict) else None
        return entries_of(self.across, _field(thread_id), (ref[:cut], ref[cut:]), md, declared)

    # -- removing entries --------------------------------------------------------------------

    def unindex(self, index: Index, thread_id: str, entries: Sequence[Entry], check: bool) -> Eval:
        """One ``UNINDEX`` call removing entries of one thread from ``index``: with
        ``check``, only where no stored checkpoint can lose its entry (the thread's data
        on a standalone server, its registry entry in a Cluster); else all of them."""
        sets = (index.order, index.by_thread)
        keys: tuple[bytes, ...]
        if not check:
            keys, head = sets, ("all", "", "")
        elif not self.cluster:
            named = self.keys(thread_id)
            keys = (*sets, named[2], named[1], self.copying_key(thread_id))
            head = ("data", "", "")
        else:
            keys = (*sets, self.registry)
            head = ("gone", self.tag(thread_id), f"{time.time() * 1000:.0f}")
        triples = (x for e in entries for x in (e.order, e.by_thread, e.ref))
        return Eval(UNINDEX, keys, (*head, *triples))

    def unindex_deleted(self, thread_id: str, reply: Sequence[Any]) -> Op[None]:
        """Remove the entries of checkpoints this process just deleted: a DELETE_REFS
        reply (ref, metadata JSON or None, ...). On a standalone server still checked
        (a put of the same checkpoint since keeps its entries); in a Cluster not."""
        found: dict[Index, list[Entry]] = {}
        declared = list(self.declared.keys)
        for ref, metadata in zip(reply[::2], reply[1::2], strict=True):
            try:
                parsed = json.loads(metadata) if metadata else None
            except (ValueError, RecursionError):  # damaged: its metadata entries stay stale
                parsed = None
            for index, entry in self.entries(thread_id, ref, parsed, declared):
                found.setdefault(index, []).append(entry)
        calls = [self.unindex(i, thread_id, e, not self.cluster) for i, e in found.items()]
        if calls:
            yield Batch(tuple(calls))

    def unindex_thread(self, thread_id: str, budget: int | None = None) -> Op[tuple[bool, int]]:
        """Remove a deleted (or expired) thread's entries from every index, read from the
        thread-first sets a page at a time, checked (see :meth:`unindex`); at most about
        ``budget`` entries. Returns whether every entry was visited, and the budget left."""
        left = sys.maxsize if budget is None else budget
        field = _field(thread_id)
        for index in self.indexes():
            low = b"[" + field
            while True:
                if left <= 0:
                    return False, 0
                page = ("ZRANGE", index.by_thread, low, b"(" + field + b"\xff", "BYLEX")
                members = yield Cmd((*page, "LIMIT", 0, SCAN))
                entries = [e for e in map(index.parse_by_thread, members) if e is not None]
                if entries:
                    yield self.unindex(index, thread_id, entries, True)
                left -= len(members)
                if len(members) < SCAN:
                    break
                low = b"(" + members[-1]
        return True, left

    # -- the registry's sweep ---------------------------------------------------------------

    def expired(self) -> Eval:
        """The call that finds threads whose registry deadline passed (up to SCAN): its
        reply is what :meth:`sweep` starts from, so a listing sends it with its first
        page."""
        return Eval(EXPIRED, (self.registry,), (f"{time.time() * 1000:.0f}", SCAN))

    def sweep(self, flat: list[bytes]) -> Op[None]:
        """Forget the threads of an :meth:`expired` reply whose keys have all expired:
        their index entries first (at most SWEEP_ENTRIES per call: a thread whose entries
        are not all gone stays registered, and the next sweep goes on), then their
        registry entries (if no writer touched them meanwhile) and thread index entries.
        Read-only, nothing; on a replica opened read-write, nothing either (the read that
        sweeps goes on)."""
        if self.read_only:
            return
        with contextlib.suppress(ReadOnlyError):
            yield from self._sweep(flat)

    def _sweep(self, flat: list[bytes]) -> Op[None]:
        pairs = [(m, s) for m, s in zip(flat[::2], flat[1::2], strict=True) if is_tag(m)]
        if not pairs:
            return
        exists = yield Batch(tuple(Cmd(("EXISTS", *self.keys(untag(m)))) for m, _ in pairs))
        gone = [pair for pair, n in zip(pairs, exists, strict=True) if not n]
        if not gone:
            return
        if self.listed:
            yield from self.load_declared()
        done: list[bytes] = []
        budget = SWEEP_ENTRIES
        for member, score in gone:
            if self.listed:
                finished, budget = yield from self.unindex_thread(untag(member), budget)
                if not finished:
                    break
            done += (member, score)
        if done:
            yield Eval(REMOVE_IF, (self.registry, self.counter), tuple(done))
            yield self.index("del", [(untag(member), None) for member in done[::2]])

    # -- builds --------------------------------------------------------------------------------

    def add(self, entries: Sequence[tuple[Index, Entry]], generation: bytes | None) -> Op[bool]:
        """Add entries (both members each) in calls of ADD_BATCH; planned for
        ``generation`` of the declared keys (``None``: any). False, with the rest not
        added, once a call finds a key declared since."""
        for start in range(0, len(entries), ADD_BATCH):
            sets: dict[bytes, int] = {}
            args: list[Any] = [b"*" if generation is None else generation]
            for index, entry in entries[start : start + ADD_BATCH]:
                for key, member in ((index.order, entry.order), (index.by_thread, entry.by_thread)):
                    args += [sets.setdefault(key, len(sets) + 2), member]
            reply = yield Eval(ADD, (self.across.indexed, *sets), tuple(args))
            if reply != 1:
                return False
        return True

    def build_checkpoints(self, threads: Sequence[str]) -> Op[None]:
        """Enter every checkpoint of these threads in the checkpoint index, from their
        ``ids`` indexes (pipelined, a page per thread per call). Damaged members are left
        out (``verify`` reports them)."""
        index = self.across.checkpoints
        for start in range(0, len(threads), SCAN):
            pending = [(t, b"-") for t in threads[start : start + SCAN]]
            while pending:
                calls = tuple(
                    Cmd(("ZRANGE", self.keys(t)[0], low, b"+", "BYLEX", "LIMIT", 0, SCAN))
                    for t, low in pending
                )
                replies = yield from tolerant_reads(calls)
                found: list[tuple[Index, Entry]] = []
                more = []
                for (thread_id, _), members in zip(pending, replies, strict=True):
                    for member in members:
                        if member.count(END) == 2:
                            found.append((index, _from_ids(member, _field(thread_id))))
                    if len(members) == SCAN:
                        more.append((thread_id, b"(" + members[-1]))
                yield from self.add(found, None)
                pending = more

    def build_key(self, key: str, threads: Sequence[str]) -> Op[None]:
        """Enter every checkpoint of these threads in a metadata key's index, from their
        records (``HSCAN`` pages, pipelined across threads). A damaged record is left out
        (``verify`` reports it)."""
        for start in range(0, len(threads), SCAN // 5):
            pending: list[tuple[str, Any]] = [(t, 0) for t in threads[start : start + SCAN // 5]]
            while pending:
                calls = tuple(
                    Cmd(("HSCAN", self.keys(t)[2], cursor, "COUNT", 100)) for t, cursor in pending
                )
                replies = yield from tolerant_reads(calls, ({}, 0))
                found: list[tuple[Index, Entry]] = []
                more = []
                for (thread_id, _), reply in zip(pending, replies, strict=True):
                    cursor, records = reply if isinstance(reply, list | tuple) else (0, {})
                    for ref, data in records.items():
                        metadata = metadata_of(ref, data)
                        if metadata is not None:
                            found += self.entries(thread_id, ref, metadata, [key])[1:]
                    if int(cursor):
                        more.append((thread_id, cursor))
                yield from self.add(found, None)
                pending = more

    def declare(self, keys: Sequence[str]) -> Op[None]:
        """Declare these metadata keys (those not declared yet count the generation up:
        from then on every write maintains them), then build every declared key not built
        yet -- also one whose build a crash cut short -- and mark it built."""
        if keys:
            flat = yield Eval(DECLARE, (self.across.indexed,), tuple(keys))
            self.declared = Declared.parse(dict(zip(flat[::2], flat[1::2], strict=True)))
        else:
            yield from self.load_declared()
        building = [key for key, ready in self.declared.keys.items() if not ready]
        if not building:
            return
        threads = yield from self.registered(lenient=True)
        for key in building:
            yield from self.build_key(key, threads)
            yield Cmd(("HSET", self.across.indexed, key, "1"))
        yield from self.load_declared()

    def wrong_slot_types(self) -> Op[CorruptCheckpointError | None]:
        """The error for the first key of the registry's slot other than the registry
        (the thread index, the indexes across threads, the declared keys) that holds
        another type than the layout gives it (a WRONGTYPE reply met it); else None."""
        wanted = [(self.heads, "zset"), (self.head_of, "hash"), (self.across.indexed, "hash")]
        wanted += [(k, "zset") for index in self.indexes() for k in (index.order, index.by_thread)]
        kinds = yield Batch(tuple(Cmd(("TYPE", key)) for key, _ in wanted))
        for (key, want), kind in zip(wanted, kinds, strict=True):
            text = kind.decode() if isinstance(kind, bytes) else kind
            if text not in ("none", want):
                reason = f"the key holds a {text}, not a {want} (overwritten by another program)"
                found = Damage(reason, BACKEND, record="index", path=path(key))
                return corrupt(found)
        return None

    # -- opening and forgetting --------------------------------------------------------------

    def open_layout(self, url: str, declare: Sequence[str]) -> Op[None]:
        """Check the layout version; read-write, store it (or upgrade it: the thread index
        and the checkpoint index are built first, so a crash leaves the older version and
        the next opening builds again), then declare and build metadata keys. Read-only
        (or on a replica), write nothing, refuse a prefix where no checkpointer ever
        wrote, and read keys of an older layout as they are.

        Raises:
            StorageNotFoundError: read-only, and nothing was ever stored under the prefix.
            SchemaVersionError: the layout key holds a newer version, or no version.
        """
        key = f"{self.prefix}:layout".encode()
        if self.read_only:
            stored, threads = yield Batch((Cmd(("GET", key)), Cmd(("EXISTS", self.registry))))
            if stored is None and not threads:
                raise StorageNotFoundError(
                    f"no checkpoints under prefix {self.prefix!r} at {url}: nothing was "
                    "ever stored there; check the prefix and the database number (opened "
                    "read-only, nothing was created)"
                )
        else:
            try:
                held = yield Cmd(("GET", key))
                _check_version(held, key, url, self.prefix)
                if older(held, lua.LAYOUT_VERSION):  # build before the layout says it is there
                    threads = yield from self.registered(lenient=True)
                    if older(held, 3):
                        yield from self.reindex(threads, "max")
                    yield from self.build_checkpoints(threads)
                stored = yield Eval(lua.LAYOUT, (key,), (lua.LAYOUT_VERSION,))
                _check_version(stored, key, url, self.prefix)  # another process's, newer
                yield from _count_registry((self.registry, self.counter))
                yield from self.declare(declare)
                self.indexed = self.listed = True
                return
            except ReadOnlyError:  # a replica: reads work, and writes will say why they fail
                stored = yield Cmd(("GET", key))
        _check_version(stored, key, url, self.prefix)
        # keys of a layout before an index that could not be upgraded (opened read-only,
        # or a replica): listing threads, or every checkpoint, reads them as they are
        self.indexed = stored is not None and not older(stored, 3)
        self.listed = stored is not None and not older(stored, 4)
        if self.listed:
            yield from self.load_declared()

    def forget(self) -> Op[bool]:
        """Delete the prefix's own keys -- the registry, its count, the thread index and
        every index across threads -- once no thread is left; False, nothing deleted,
        while one is."""
        declared = yield from self.load_declared()
        keys = [self.registry, self.counter, self.heads, self.head_of, self.across.indexed]
        keys += [k for index in self.indexes(declared) for k in (index.order, index.by_thread)]
        return bool((yield Eval(FORGET, tuple(keys), ())))


def older(stored: bytes | None, version: int) -> bool:
    """Whether a layout key holds a version before ``version``; ``None``, an empty prefix,
    or a key that is no version (refused) is not."""
    return stored is not None and stored.isascii() and stored.isdigit() and int(stored) < version


def _check_version(stored: bytes | None, key: bytes, url: str, prefix: str) -> None:
    if stored is None:
        return
    if not (stored.isascii() and stored.isdigit()):
        raise SchemaVersionError(
            f"the key {key.decode()!r} at {url} holds {stored.decode(errors='replace')!r}"
            ", not a statekeeper layout version: it belongs to something else; "
            "use another prefix"
        )
    if int(stored) > lua.LAYOUT_VERSION:
        raise SchemaVersionError(
            f"the keys under prefix {prefix!r} at {url} use layout version {int(stored)}, "
            f"newer than this statekeeper knows ({lua.LAYOUT_VERSION}); upgrade statekeeper"
        )


def _count_registry(registry: tuple[bytes, bytes]) -> Op[None]:
    """Count the members of a layout-1 registry (none yet). A registry overwritten with
    another type does not stop the opening: reading it says so (CorruptCheckpointError)."""
    try:
        yield Eval(REGISTRY, registry, ("start",))
    except StorageError as exc:
        if not wrong_type(exc):
            raise


def tolerant_reads(calls: tuple[Cmd, ...], empty: Any = ()) -> Op[list[Any]]:
    """The replies of pipelined reads of threads' keys; a key of another type (damage,
    which ``verify`` reports) reads as ``empty``."""
    try:
        replies: list[Any] = yield Batch(calls)
        return replies
    except StorageError as exc:
        if not wrong_type(exc):
            raise
    replies = []
    for call in calls:
        try:
            replies.append((yield call))
        except StorageError as one:
            if not wrong_type(one):
                raise
            replies.append(empty)
    return replies


def _field(thread_id: str) -> bytes:
    return ordered(thread_id)


def _from_ids(member: bytes, thread: bytes) -> Entry:
    """The checkpoint index entry of an ``ids`` member (``E(checkpoint id) E(ns)``)."""
    cut = member.index(END) + 2
    return Entry(b"", member[:cut], thread, member[cut:])


def metadata_of(ref: bytes, data: bytes) -> dict[str, Any] | None:
    """The metadata of a stored record, checked; ``None`` for a damaged one (it enters
    the checkpoint index only; ``verify`` reports it)."""
    try:
        return Record.parse(data, ref).metadata
    except Bad:
        return None

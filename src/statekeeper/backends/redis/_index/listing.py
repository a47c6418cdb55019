"""Listing through the indexes across threads (:mod:`.members`), written once for the
sync and async APIs (see :mod:`statekeeper.backends.redis._reads`):

* ``list(None)`` walks the checkpoint index backwards a page at a time (``ZRANGE ...
  BYLEX REV LIMIT``), or, when the filter names a built metadata key with an indexed
  value, that key's index within the value; each page's entries are read from their
  threads with one pipelined ``READ`` per thread, and checked exactly with the filter
  (the index only pre-selects). O(page), whatever the number of threads.
* ``list(thread, filter=...)`` on such a key walks the key's thread-first set within the
  thread and the value, and reads the page with one ``READ``.
* Entries whose checkpoint is not there are stale (:mod:`.`): left out, and removed by a
  read-write reader where no stored checkpoint can lose its entry (:meth:`Upkeep.unindex`).
  A damaged member is logged and skipped (``verify`` reports it).
* Keys of a layout before the checkpoint index, opened read-only, are listed as that
  layout was: a merge of every registered thread's ``ids`` index.

Also the reading steps every listing shares: one ``READ`` call, a page of items emitted,
several threads' checkpoints loaded at once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Sequence
from typing import Any, cast

from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper.backends.redis import _lua as lua
from statekeeper.backends.redis._client import ordered
from statekeeper.backends.redis._index.members import Entry, Index, below_range, index_text
from statekeeper.backends.redis._index.upkeep import Upkeep
from statekeeper.backends.redis._integrity.checked import log
from statekeeper.backends.redis._integrity.records import Payloads
from statekeeper.backends.redis._integrity.seal import path
from statekeeper.backends.redis._io import Batch, Call, Cmd, Emit, Eval, Op, Stream
from statekeeper.backends.redis._layout import Item, unstable, value_chains
from statekeeper.backends.redis._listing import SCAN, Budget, Merge, Source, fill
from statekeeper.checkpointers.semantics import matches
from statekeeper.errors import CorruptCheckpointError, ReadOnlyError

__all__ = ["READ_ATTEMPTS", "Listings"]

READ_ATTEMPTS = 5  # reads of a checkpoint whose large values vanished meanwhile
Chosen = tuple[Index, bytes]  # a metadata index and E(text) of the value it is read at
Group = list[tuple[int, bytes]]  # (source, ref) of a page, in listing order


class Listings(Upkeep):
    """The listings across threads, and the reading steps every listing shares."""

    def _read(
        self,
        thread_id: str,
        keys: tuple[bytes, ...],
        what: str,
        *mode: Any,
        known: Sequence[bytes] = (),
        refresh: bool = True,
    ) -> Op[list[Item]]:
        """One READ script call (see its ARGV), its thread-wide checks passed; with
        ``"f"``, the large values fetched too. Consistent: read again if a checkpoint
        changed in between. Restarts the thread's TTL with ``refresh_on_read`` (never
        read-only)."""
        refresh = refresh and self.refresh_on_read and not self.read_only
        ttl = self.ttl_ms if refresh else -1
        call = Eval(lua.READ, keys, (ttl, what, len(known) // 2, *known, *mode))
        for _ in range(READ_ATTEMPTS):
            if refresh:
                _, reply = yield Batch((self.touch(thread_id, only_existing=True), call))
            else:
                reply = yield call
            items = self._checked(thread_id, reply)
            if what != "f" or (yield from fill([(keys, value_chains(items))])):
                return items
        raise unstable()

    def _matches(self, thread_id: str, item: Item, filter: dict[str, Any] | None) -> bool:
        return not filter or matches(self._record(thread_id, item).metadata, filter)

    def _emit_page(
        self,
        serde: SerializerProtocol,
        thread: tuple[str, tuple[bytes, ...]],
        found: list[Item],
        memory: tuple[Sequence[bytes], dict[bytes, bytes]],
        budget: Budget,
    ) -> Generator[Call | Emit, Any, bool]:
        """Emit the checkpoints of one READ reply's items; True once ``budget`` is spent.
        A damaged one skipped (``on_corrupt="fallback"``), the rest are read again: the
        reply sent each value once, with the first item that needed it."""
        thread_id, keys = thread
        known, data = memory
        payloads = Payloads(data)  # one per READ reply
        queue = list(found)
        while queue:
            item = queue.pop(0)
            try:
                tup = self._load_item(serde, thread_id, item, payloads)
            except CorruptCheckpointError as exc:
                self._skip(exc)
                if queue:
                    refs = [later[0] for later in queue]
                    queue = yield from self._read(thread_id, keys, "f", "refs", *refs, known=known)
                    payloads = Payloads(data)
                continue
            if tup is not None:
                yield Emit(tup)
                if budget.spend():
                    return True
        return False

    # -- which index a filtered listing reads ------------------------------------------------

    def _chosen(self, filter: dict[str, Any] | None) -> Op[Chosen | None]:
        """The metadata index to pre-select ``filter``'s matches from: a built key of the
        filter whose value is indexed (the one with the fewest entries for its value, when
        there are several); ``None``: no index serves it (scan)."""
        if not filter or not self.listed:
            return None
        ready = self.declared.keys
        found: list[Chosen] = []
        for key, value in filter.items():
            text = index_text(value) if ready.get(key) else None
            if text is not None:
                found.append((self.across.meta(key), ordered(text)))
        if len(found) > 1:
            counts = yield Batch(
                tuple(
                    Cmd(("ZLEXCOUNT", index.order, b"[" + value, b"(" + value + b"\xff"))
                    for index, value in found
                )
            )
            found = [min(zip(counts, range(len(found)), found, strict=True))[2]]
        return found[0] if found else None

    # -- list(None) ----------------------------------------------------------------------------

    def _list_all(
        self,
        serde: SerializerProtocol,
        filter: dict[str, Any] | None,
        below: str | None,
        limit: int | None,
    ) -> Stream:
        """``list(None)``: the checkpoint index (or a metadata key's) a page at a time,
        newest first (ties: thread id, then namespace, descending), after the registry's
        sweep and its O(1) check against its count, which share the first page's round
        trip (entries the sweep then removes read as stale)."""
        if not self.listed:
            yield from self._list_merged(serde, filter, below, limit)
            return
        chosen = yield from self._chosen(filter)
        index, value = chosen or (self.across.checkpoints, b"")
        # with an index, a page's entries (nearly) all match: read them whole at once;
        # else (or with more keys to check) records first, values only for the matches
        scan = filter if not chosen or len(filter or {}) > 1 else None
        high, low = below_range(value, ordered(below) if below is not None else None)
        budget = Budget(limit)
        size = budget.page(scan)
        walk = ("ZRANGE", index.order, high, low, "BYLEX", "REV", "LIMIT", 0, size)
        if self.read_only:
            counted, members = yield Batch((self._count_call(), Cmd(walk)))
        else:
            expired, counted, members = yield Batch((self.expired(), self._count_call(), Cmd(walk)))
            yield from self.sweep(expired)
        self._check_count(counted)
        while True:
            entries = self._entries(index, members)
            sources: dict[str, int] = {}
            group: Group = []
            for entry, thread_id in entries:
                group.append((sources.setdefault(thread_id, len(sources)), entry.ref))
            listed = [Source(thread_id, self.keys(thread_id)) for thread_id in sources]
            found, stale = yield from self._load_group(serde, listed, group, scan)
            if stale and not self.read_only:
                by_ref = {(sources[t], e.ref): (e, t) for e, t in entries}
                yield from self._drop_stale(index, [by_ref[s] for s in stale])
            for tup in found:
                if chosen and not matches(cast(dict[str, Any], tup.metadata), filter or {}):
                    continue  # the index only pre-selects: equality is checked exactly
                yield Emit(tup)
                if budget.spend():
                    return
            if len(members) < size:
                return
            high = b"(" + members[-1]
            size = budget.page(scan)
            walk = ("ZRANGE", index.order, high, low, "BYLEX", "REV", "LIMIT", 0, size)
            members = yield Cmd(walk)

    def _entries(self, index: Index, members: list[bytes]) -> list[tuple[Entry, str]]:
        """The entries (and thread ids) of index members; a damaged one is logged and
        left out (``verify`` reports it, ``verify(repair=True)`` removes it)."""
        found = []
        for member in members:
            entry = index.parse(member)
            try:
                thread_id = entry.thread_id() if entry is not None else None
            except ValueError:  # not UTF-8
                thread_id = None
            if entry is None or thread_id is None:
                _damaged(index, member)
            else:
                found.append((entry, thread_id))
        return found

    def _drop_stale(self, index: Index, stale: list[tuple[Entry, str]]) -> Op[None]:
        """Remove stale entries a read met, thread by thread, where that cannot lose a
        stored checkpoint's entry (see :meth:`Upkeep.unindex`)."""
        by_thread: dict[str, list[Entry]] = {}
        for entry, thread_id in stale:
            by_thread.setdefault(thread_id, []).append(entry)
        with contextlib.suppress(ReadOnlyError):  # a replica opened read-write: they stay
            yield Batch(tuple(self.unindex(index, t, e, True) for t, e in by_thread.items()))

    # -- one thread, filtered through a metadata index -------------------------------------

    def _list_thread_by(
        self,
        serde: SerializerProtocol,
        place: tuple[str, str | None, str | None, str | None],
        filter: dict[str, Any],
        chosen: Chosen,
        budget: Budget,
    ) -> Stream:
        """One thread's checkpoints whose metadata has the chosen key's value, newest
        first: ``place`` is (thread id, namespace or None: all, checkpoint id or None: all,
        the id to list below). A page of the thread-first set, then one READ of its refs
        (in the namespace), each checked with the whole filter: when the chosen key is the
        whole filter, a page as long as the limit still allows, read whole; else a full
        page of records, and the matches read whole."""
        thread_id, ns, checkpoint_id, below = place
        index, value = chosen
        keys = self.keys(thread_id)
        known, data = self.written.known(thread_id, ns)
        prefix = ordered(thread_id) + value
        if checkpoint_id is not None:
            at = prefix + ordered(checkpoint_id)
            high, low = b"(" + at + b"\xff", b"[" + at
        else:
            high, low = below_range(prefix, ordered(below) if below is not None else None)
        ens = ordered(ns) if ns is not None else None
        exact = len(filter) == 1  # the index selects the matches (the check is a formality)
        while True:
            size = budget.page(None if exact else filter)
            members = yield Cmd(
                ("ZRANGE", index.by_thread, high, low, "BYLEX", "REV", "LIMIT", 0, size)
            )
            entries = {}
            for member in members:
                entry = index.parse_by_thread(member)
                if entry is None:
                    _damaged(index, member, by_thread=True)
                elif ens is None or entry.ns == ens:
                    entries[entry.ref] = entry
            items: list[Item] = []
            if entries:
                what, hint = ("f", known) if exact else ("r", ())
                items = yield from self._read(thread_id, keys, what, "refs", *entries, known=hint)
            found, stale = self._sorted(thread_id, items, filter, entries)
            if found and not exact:
                refs = [item[0] for item in found]
                found = yield from self._read(thread_id, keys, "f", "refs", *refs, known=known)
            if stale and not self.read_only:
                yield from self._drop_stale(index, stale)
            if (yield from self._emit_page(serde, (thread_id, keys), found, (known, data), budget)):
                return
            if len(members) < size:
                return
            high = b"(" + members[-1]

    def _sorted(
        self,
        thread_id: str,
        items: list[Item],
        filter: dict[str, Any],
        entries: dict[bytes, Entry],
    ) -> tuple[list[Item], list[tuple[Entry, str]]]:
        """The items of one thread's page that match ``filter`` (or are listed but
        missing: loading them reports the damage), and the entries whose checkpoint is
        not there (stale)."""
        found, stale = [], []
        for item in items:
            try:
                if (item[1] and self._matches(thread_id, item, filter)) or item[4]:
                    found.append(item)
                elif not item[1]:
                    stale.append((entries[item[0]], thread_id))
            except CorruptCheckpointError as exc:
                self._skip(exc)
        return found, stale

    # -- keys of an older layout, opened read-only -------------------------------------------

    def _list_merged(
        self,
        serde: SerializerProtocol,
        filter: dict[str, Any] | None,
        below: str | None,
        limit: int | None,
    ) -> Stream:
        """``list(None)`` of keys without the checkpoint index (a layout before 4, opened
        read-only): a k-way merge of every registered thread's newest-first index, the
        registry's count and every thread's indexes checked first (a merge of damaged
        indexes would leave checkpoints out unnoticed)."""
        threads = yield from self._checked_registry()
        sources = [Source(thread_id, self.keys(thread_id)) for thread_id in threads]
        for start in range(0, len(sources), SCAN):
            chunk = sources[start : start + SCAN]
            checks = tuple(Eval(lua.READ, s.keys, (-1, "r", 0, "refs")) for s in chunk)
            for source, reply in zip(chunk, (yield Batch(checks)), strict=True):
                self._checked(source.thread_id, reply)
        top = b"(" + ordered(below) if below is not None else b"+"
        budget = Budget(limit)
        merge = Merge(sources, top, page=budget.page(filter))
        yield from merge.start()
        while merge.heap:
            group = yield from merge.take(budget.page(filter))
            found, _ = yield from self._load_group(serde, sources, group, filter)
            for tup in found:
                yield Emit(tup)
                if budget.spend():
                    return

    # -- several threads' checkpoints at once --------------------------------------------------

    def _load_group(
        self,
        serde: SerializerProtocol,
        sources: list[Source],
        group: Group,
        filter: dict[str, Any] | None,
    ) -> Op[tuple[list[CheckpointTuple], Group]]:
        """Load checkpoints of several threads (one script per thread), in ``group``'s
        order; with a filter, records first and everything only for those that match.
        Also returns the refs that are not there (deleted since the index was read, or
        stale entries). A damaged checkpoint raises (or is skipped and logged,
        ``on_corrupt="fallback"``)."""
        wanted: dict[int, list[bytes]] = {}
        for index, ref in group:
            wanted.setdefault(index, []).append(ref)
        stale: Group = []
        if filter:
            wanted = yield from self._prefiltered(sources, wanted, filter, stale)
        loaded = yield from self._load_refs(sources, wanted)
        found = []
        payloads = {index: Payloads() for index in wanted}  # one per READ reply
        dirty: set[int] = set()  # threads whose reply lost a damaged item's values
        for index, ref in group:
            if (index, ref) not in loaded:
                continue
            if index in dirty:  # it may lean on them: read it alone
                loaded.update((yield from self._load_refs(sources, {index: [ref]})))
                payloads[index] = Payloads()
            try:
                item = loaded[(index, ref)]
                tup = self._load_item(serde, sources[index].thread_id, item, payloads[index])
            except CorruptCheckpointError as exc:
                self._skip(exc)
                dirty.add(index)
                continue
            if tup is not None:
                found.append(tup)
            elif not item[1]:
                stale.append((index, ref))
        return found, stale

    def _prefiltered(
        self,
        sources: list[Source],
        wanted: dict[int, list[bytes]],
        filter: dict[str, Any],
        stale: Group,
    ) -> Op[dict[int, list[bytes]]]:
        """The refs of ``wanted`` whose records match ``filter`` (or that are listed but
        missing: loading them reports the damage), read as records only (one script per
        thread); those not there are added to ``stale``."""
        order = list(wanted)
        replies = yield Batch(
            tuple(Eval(lua.READ, sources[i].keys, (-1, "r", 0, "refs", *wanted[i])) for i in order)
        )
        matching: dict[int, list[bytes]] = {}
        for i, reply in zip(order, replies, strict=True):
            thread_id = sources[i].thread_id
            for item in self._checked(thread_id, reply):
                try:
                    if item[4] or (item[1] and self._matches(thread_id, item, filter)):
                        matching.setdefault(i, []).append(item[0])
                    elif not item[1]:
                        stale.append((i, item[0]))
                except CorruptCheckpointError as exc:
                    self._skip(exc)
        return matching

    def _load_refs(
        self, sources: list[Source], wanted: dict[int, list[bytes]]
    ) -> Op[dict[tuple[int, bytes], Item]]:
        """The READ items (in full) of these refs of several threads, by (source, ref)."""
        order = list(wanted)
        calls = tuple(
            Eval(lua.READ, sources[i].keys, (-1, "f", 0, "refs", *wanted[i])) for i in order
        )
        for _ in range(READ_ATTEMPTS):
            if not calls:
                return {}
            replies = yield Batch(calls)
            checked = [
                self._checked(sources[i].thread_id, reply)
                for i, reply in zip(order, replies, strict=True)
            ]
            chains = [
                (sources[i].keys, value_chains(items))
                for i, items in zip(order, checked, strict=True)
            ]
            if (yield from fill(chains)):
                return {
                    (i, item[0]): item
                    for i, items in zip(order, checked, strict=True)
                    for item in items
                }
        raise unstable()


def _damaged(index: Index, member: bytes, *, by_thread: bool = False) -> None:
    key = index.by_thread if by_thread else index.order
    log.warning(
        "a member of the index %s is damaged (no checkpoint entry); skipped: "
        "verify(repair=True) removes it",
        path(key, member),
    )

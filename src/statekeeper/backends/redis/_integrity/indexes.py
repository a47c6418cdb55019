"""``verify()`` of the indexes across threads (:mod:`statekeeper.backends.redis._index`):

* per thread, every stored checkpoint's entries -- in the checkpoint index, and in the
  index of each built metadata key its metadata has an indexed value for -- must be
  there, both members of each (``ZMSCORE``, a page at a time). One missing is damage
  (``record="index"``), after a second look (a checkpoint deleted meanwhile is not);
  ``repair`` adds it.
* every member of every index is read (``ZRANGE ... BYLEX`` pages): one that names no
  checkpoint entry is damage, removed by ``repair``. Stale entries (their checkpoint is
  not there, or no longer has that value) are no damage; ``repair`` removes them, after
  a second look at the end of the walk (on a standalone server in a script that keeps an
  entry whose checkpoint is there by then).

A key of another type than the layout gives it is damage too; the other checks are then
left out. Keys still being built (a crash cut the build short) are left out: the next
read-write opening builds them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from statekeeper.backends.redis._client import ordered, split_ordered
from statekeeper.backends.redis._index.members import Entry, Index, index_text
from statekeeper.backends.redis._index.upkeep import Upkeep, metadata_of, tolerant_reads
from statekeeper.backends.redis._integrity.audit import Audit, Snapshot
from statekeeper.backends.redis._integrity.seal import BACKEND, path
from statekeeper.backends.redis._io import Batch, Cmd, Op
from statekeeper.errors import Damage

__all__ = ["IndexAudit"]

PAGE = 500  # members per read
SHOWN = 20  # missing entries reported one by one per thread and index; then a count


class IndexAudit:
    """The checks above, over one checkpointer's layout (``layout``: its operations)."""

    def __init__(self, layout: Upkeep, *, repair: bool) -> None:
        self.layout = layout
        self.repair = repair
        self.usable = True  # False: a key of another type (reported): nothing else checked
        self.stale: list[tuple[Index, Entry, str]] = []  # candidates for removal

    def start(self) -> Op[list[Damage]]:
        """Read the declared keys; the damage of keys of another type."""
        declared = yield from self.layout.load_declared()
        self.indexes = [
            index
            for index in self.layout.indexes(declared)
            if index.key is None or declared.keys.get(index.key)
        ]
        wanted = [(self.layout.across.indexed, "hash")]
        wanted += [(k, "zset") for index in self.indexes for k in (index.order, index.by_thread)]
        kinds = yield Batch(tuple(Cmd(("TYPE", key)) for key, _ in wanted))
        found = []
        for (key, want), kind in zip(wanted, kinds, strict=True):
            text = kind.decode() if isinstance(kind, bytes) else kind
            if text not in ("none", want):
                reason = f"an index across threads holds a {text}, not a {want}"
                found.append(Damage(reason, BACKEND, record="index", path=path(key)))
        self.usable = not found
        return found

    # -- each stored checkpoint has its entries ----------------------------------------------

    def thread(self, thread_id: str, snap: Snapshot, audit: Audit) -> Op[list[Damage]]:
        """The entries missing for the checkpoints of one thread's snapshot (those of
        an intact record for metadata keys), added back when repairing."""
        if not self.usable:
            return []
        ready = [index.key for index in self.indexes if index.key is not None]
        expected = []
        for ref in snap.cp:
            record = audit.records.get(ref)
            metadata = record.metadata if record is not None else None
            expected += self.layout.entries(thread_id, ref, metadata, ready)
        missing = yield from self._missing(expected)
        if missing:  # a second look: a checkpoint deleted meanwhile is no damage
            cp = self.layout.keys(thread_id)[2]
            there = yield Batch(tuple(Cmd(("HEXISTS", cp, e.ref)) for _, e in missing))
            missing = yield from self._missing(
                [m for m, t in zip(missing, there, strict=True) if t]
            )
        if missing and self.repair:
            yield from self.layout.add(missing, None)
        return _missing_damage(thread_id, missing, self.repair)

    def _missing(self, entries: list[tuple[Index, Entry]]) -> Op[list[tuple[Index, Entry]]]:
        """The entries one of whose two members is not in its set."""
        found = []
        for start in range(0, len(entries), PAGE):
            chunk = entries[start : start + PAGE]
            calls = []
            for index, entry in chunk:
                calls += [
                    Cmd(("ZSCORE", index.order, entry.order)),
                    Cmd(("ZSCORE", index.by_thread, entry.by_thread)),
                ]
            scores = yield Batch(tuple(calls))
            found += [e for i, e in enumerate(chunk) if None in scores[2 * i : 2 * i + 2]]
        return found

    # -- every member names an entry, and stale ones go ----------------------------------------

    def walk(self) -> Op[list[Damage]]:
        """Read every member of every index: damaged members are damage (removed when
        repairing); stale entries are collected and, when repairing, removed once they
        are still stale at the end."""
        if not self.usable:
            return []
        found: list[Damage] = []
        for index in self.indexes:
            for key, parse in (
                (index.order, index.parse),
                (index.by_thread, index.parse_by_thread),
            ):
                low = b"-"
                while True:
                    members = yield Cmd(("ZRANGE", key, low, b"+", "BYLEX", "LIMIT", 0, PAGE))
                    found += yield from self._page(index, key, members, parse)
                    if len(members) < PAGE:
                        break
                    low = b"(" + members[-1]
        if self.repair and self.stale:
            yield from self._remove_stale()
        return found

    def _page(self, index: Index, key: bytes, members: list[bytes], parse: Any) -> Op[list[Damage]]:
        found, good = [], []
        for member in members:
            entry = parse(member)
            thread_id = _thread_of(entry)
            if entry is None or thread_id is None:
                reason = "an index member names no checkpoint entry"
                found.append(Damage(reason, BACKEND, record="index", path=path(key, member)))
                if self.repair:
                    yield Cmd(("ZREM", key, member))
            else:
                good.append((entry, thread_id))
        if self.repair and good:
            stale = yield from self._stale(index, good)
            self.stale += [(index, entry, thread_id) for entry, thread_id in stale]
        return found

    def _stale(self, index: Index, entries: Sequence[tuple[Entry, str]]) -> Op[list[Any]]:
        """The entries whose checkpoint is not there, or (a metadata key's) has another
        value for the key: the record of each read (one pipelined batch)."""
        calls = tuple(Cmd(("HGET", self.layout.keys(t)[2], e.ref)) for e, t in entries)
        # a key of another type (reported with its thread) reads as b"", not None: not
        # taken for a stale entry's missing record
        records = yield from tolerant_reads(calls, b"")
        stale = []
        for (entry, thread_id), data in zip(entries, records, strict=True):
            if data is None:
                stale.append((entry, thread_id))
            elif index.key is not None:
                metadata = metadata_of(entry.ref, data)
                text = index_text(metadata.get(index.key)) if metadata is not None else None
                if metadata is not None and (text is None or ordered(text) != entry.value):
                    stale.append((entry, thread_id))
        return stale

    def _remove_stale(self) -> Op[None]:
        """Remove the stale entries that still are: those of a checkpoint that is not
        there checked again by the removal's script on a standalone server (and looked
        at a second time in a Cluster), those of another value as they are."""
        by_index: dict[Index, list[tuple[Entry, str]]] = {}
        for index, entry, thread_id in self.stale:
            by_index.setdefault(index, []).append((entry, thread_id))
        cluster = self.layout.cluster
        for index, entries in by_index.items():
            for start in range(0, len(entries), PAGE):
                still = yield from self._stale(index, entries[start : start + PAGE])
                there = yield from tolerant_reads(
                    tuple(Cmd(("HEXISTS", self.layout.keys(t)[2], e.ref)) for e, t in still), b""
                )
                calls = [
                    # a checkpoint there has another value: its entry goes; one not there:
                    # checked by the script on a standalone server (seen twice in a Cluster)
                    self.layout.unindex(index, thread_id, [entry], not (is_there or cluster))
                    for (entry, thread_id), is_there in zip(still, there, strict=True)
                ]
                if calls:
                    yield Batch(tuple(calls))


def _missing_damage(
    thread_id: str, missing: list[tuple[Index, Entry]], repaired: bool
) -> list[Damage]:
    found = []
    counts: dict[bytes, int] = {}
    for index, entry in missing:
        n = counts[index.order] = counts.get(index.order, 0) + 1
        what = "the checkpoint index" if index.key is None else f"the index of {index.key!r}"
        if n > SHOWN:
            continue
        try:
            ns, checkpoint_id, _ = split_ordered(entry.ref)
        except ValueError:  # (a ref of cp that is no text: the thread's audit reports it)
            continue
        reason = f"its entry in {what} is missing" + (" [added]" if repaired else "")
        where = path(index.order, entry.order)
        found.append(Damage(reason, BACKEND, thread_id, ns, checkpoint_id, "index", where))
    for key, n in counts.items():
        if n > SHOWN:
            reason = f"{n - SHOWN} more of its checkpoints have no entry in {key.decode()!r}"
            found.append(Damage(reason, BACKEND, thread_id, record="index", path=path(key)))
    return found


def _thread_of(entry: Entry | None) -> str | None:
    try:
        return entry.thread_id() if entry is not None else None
    except ValueError:
        return None

"""What the index (:mod:`.catalog_files`) says, merged into one view: the base's sorted
files with the journals' lines replayed over them.

A journal line is one of (``t`` a thread id, ``n`` a namespace)::

    {"t": ..., "n": ..., "c": [ids]}     these checkpoints may exist (written before the
                                         put or copy that stores them); in the root
                                         namespace, the thread's head is pending too
    {"t": ..., "pending": true}          the thread's head is about to change
    {"t": ..., "h": id or null}          the thread's head is now this (after a change)
    {"t": ..., "n": ..., "drop": [ids]}  these checkpoints were deleted (after it)
    {"t": ..., "gone": true}             the thread was deleted, head and all (after it)

Lines of one thread are written under that thread's lock, so each journal has them in the
order the changes happened, and a later journal's come after an earlier one's: replaying
them in order gives, for each checkpoint, whether it may exist and, for each thread, its
head — or that its head is *pending*: a change was announced and not confirmed (it is in
progress, or its writer was killed), so a reader must read that thread's head itself.

A journal is read by :class:`JournalTail`, from where it was last read. A :class:`View` is
immutable: reading more of the live journal makes a new one (copying what the new lines
change), so a listing in progress keeps a consistent view.
"""

from __future__ import annotations

import bisect
import heapq
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, cast

from statekeeper.backends.file._log.catalog_files import (
    JOURNAL,
    STATE,
    CatalogDamage,
    State,
    check_header,
    journal_path,
    read_sorted,
    read_state,
    sorted_desc,
)
from statekeeper.backends.file._log.head import Head, head_path, read_head
from statekeeper.backends.file._log.lines import DamagedIndex, intact, prev_of, unline

__all__ = [
    "PENDING",
    "Audit",
    "Contents",
    "HeadKey",
    "JournalTail",
    "Key",
    "Replay",
    "View",
    "contents",
]

Key = tuple[str, str, str]  # (checkpoint id, thread id, namespace): the listing's order
HeadKey = tuple[str, str]  # (checkpoint id, thread id): the thread index's order


class JournalTail:
    """The records of one journal, read incrementally: each :meth:`read` returns those of
    the lines added since the last one (every committed line, and complete chained lines
    past the head; never a torn tail)."""

    def __init__(self, path: Path, generation: int) -> None:
        self.path = path
        self.generation = generation
        self.size = 0  # where the lines read so far end
        self._ino: int | None = None
        self._prev = b""

    def read(self) -> list[dict[str, Any]]:
        """The records of the lines added since the last call.

        Raises:
            CatalogDamage: the journal or its head is damaged, missing, shorter than its
                head or than what was read before, or was replaced.
        """
        path = self.path
        try:
            head_fd = os.open(head_path(path), os.O_RDONLY)  # the head before the journal
            try:
                head = read_head(head_fd, head_path(path), JOURNAL)
            finally:
                os.close(head_fd)
            fd = os.open(path, os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError):
            raise CatalogDamage("the journal or its head is missing", path) from None
        except DamagedIndex as damage:
            raise CatalogDamage(str(damage), path) from None
        try:
            stat = os.fstat(fd)
            if self._ino is not None and stat.st_ino != self._ino:
                raise CatalogDamage("the journal was replaced while it was in use", path)
            if head.generation != self.generation or stat.st_size < max(head.end, self.size):
                raise CatalogDamage(
                    f"it ends at byte {stat.st_size}, but its head says {head.end} bytes were "
                    "committed (or it is another journal's copy): committed lines are missing",
                    path,
                )
            data = os.pread(fd, stat.st_size - self.size, self.size)
        finally:
            os.close(fd)
        self._ino = stat.st_ino
        return self._parse(data, head)

    def _parse(self, data: bytes, head: Head) -> list[dict[str, Any]]:
        records = []
        at, pos = self.size, 0
        if at == 0:
            end = data.find(b"\n")
            if end == -1:
                raise CatalogDamage("its header line is missing", self.path)
            self._prev = check_header(data[:end], "journal", self.generation, self.path)
            at = pos = end + 1
        while (end := data.find(b"\n", pos)) != -1:
            raw = data[pos:end]
            if not intact(raw) or prev_of(raw) != self._prev:
                reason = "damaged line" if not intact(raw) else "line that does not follow"
                raise CatalogDamage(f"a {reason} at byte {at}", self.path)
            try:
                record = unline(raw)[2]
            except DamagedIndex:
                raise CatalogDamage(f"an unreadable line at byte {at}", self.path) from None
            self._prev, at, pos = raw[:16], at + len(raw) + 1, end + 1
            if at == head.end and self._prev != head.last:
                raise CatalogDamage(
                    f"its line ending at byte {at} is not the one committed", self.path
                )
            records.append(record)
        if at < head.end:
            raise CatalogDamage(f"a committed line before byte {head.end} is torn", self.path)
        self.size = at
        return records


class _Pending:
    def __repr__(self) -> str:
        return "PENDING"


PENDING: Final = _Pending()
HeadValue = str | None | _Pending


def _ids(record: Mapping[str, Any], field: str) -> list[str]:
    ids = record.get(field)
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise ValueError(f"{field} is not a list of ids")
    if not isinstance(record.get("n"), str):
        raise ValueError("n is not a namespace")
    return ids


class Replay:
    """The lines of one journal replayed: per checkpoint key, whether it may exist (``True``)
    or was deleted (``False``); the threads deleted whole (their keys from older layers are
    gone); and the threads' heads (an id, ``None``: none, or :data:`PENDING`)."""

    def __init__(self, other: Replay | None = None) -> None:
        self.keys: dict[Key, bool] = dict(other.keys) if other else {}
        self.by_thread: dict[str, set[Key]] = dict(other.by_thread) if other else {}
        self.gone: set[str] = set(other.gone) if other else set()
        self.heads: dict[str, HeadValue] = dict(other.heads) if other else {}
        self._owned: set[str] = set()  # threads whose key set is this replay's own copy

    def apply(self, record: Mapping[str, Any], path: Path) -> tuple[set[Key], str]:
        """Apply one line; return the keys it touched (in any layer: a deleted thread's)
        and its thread.

        Raises:
            CatalogDamage: the line is not one of the five kinds.
        """
        try:
            t = record["t"]
            if not isinstance(t, str):
                raise ValueError("t is not a thread id")
            return self._apply(t, record), t
        except (KeyError, ValueError, TypeError) as exc:
            raise CatalogDamage(f"a malformed line ({exc})", path) from None

    def _apply(self, t: str, record: Mapping[str, Any]) -> set[Key]:
        if "c" in record or "drop" in record:
            present = "c" in record
            ids = _ids(record, "c" if present else "drop")
            if present and record["n"] == "":
                self.heads[t] = PENDING
            return {self._set((checkpoint_id, t, record["n"]), present) for checkpoint_id in ids}
        if "h" in record:
            if not isinstance(record["h"], str | None):
                raise ValueError("h is not an id")
            self.heads[t] = record["h"]
        elif record.get("pending") is True:
            self.heads[t] = PENDING
        elif record.get("gone") is True:
            touched = self.by_thread.pop(t, set())
            self._owned.discard(t)
            for key in touched:
                del self.keys[key]
            self.gone.add(t)
            self.heads[t] = None
            return touched
        else:
            raise ValueError("no known field")
        return set()

    def _set(self, key: Key, value: bool) -> Key:
        self.keys[key] = value
        thread_id = key[1]
        if thread_id not in self._owned:  # copied on first write: older views share it
            self.by_thread[thread_id] = set(self.by_thread.get(thread_id, ()))
            self._owned.add(thread_id)
        self.by_thread[thread_id].add(key)
        return key


_BASE: Final = object()  # "not in any journal: the base says"


class View:
    """The index as of one reading: the base (``state``'s sorted files) and the journals'
    replays, oldest first. Also the journal's entries, sorted: ``jkeys`` (checkpoints that
    may exist) and ``jheads`` (heads that are ids), and the threads whose head is pending."""

    def __init__(
        self, folder: Path, state: State, layers: list[tuple[JournalTail, Replay, int]]
    ) -> None:
        self.folder = folder
        self.state = state
        self.layers = layers  # (the journal, its replay, how far it was read)
        self.jkeys: list[Key] = []
        self.jheads: list[HeadKey] = []
        self.pending: set[str] = set()
        self._head_key: dict[str, HeadKey] = {}
        self._rebuild()

    def _rebuild(self) -> None:
        """Sort the journals' entries anew (a bisected insertion each would be quadratic)."""
        keys = {key for _, replay, _ in self.layers for key in replay.keys}
        self.jkeys = sorted(key for key in keys if self.status(key) is True)
        self.pending, self._head_key = set(), {}
        for thread in {t for _, replay, _ in self.layers for t in replay.heads}:
            head = self.head(thread)
            if head is PENDING:
                self.pending.add(thread)
            elif isinstance(head, str):
                self._head_key[thread] = (head, thread)
        self.jheads = sorted(self._head_key.values())

    def advanced(self, records: list[dict[str, Any]]) -> View:
        """A new view: this one with ``records`` (new lines of the live journal) replayed."""
        tail, replay, _ = self.layers[-1]
        live = Replay(replay)
        keys: set[Key] = set()
        threads: set[str] = set()
        for record in records:
            touched, thread = live.apply(record, tail.path)
            keys |= touched
            threads.add(thread)
            if record.get("gone") is True:  # the thread's keys in older journals go too
                for _, older, _ in self.layers[:-1]:
                    keys |= older.by_thread.get(thread, set())
        new = View.__new__(View)
        new.folder, new.state = self.folder, self.state
        new.layers = [*self.layers[:-1], (tail, live, tail.size)]
        if len(keys) + len(threads) > 64:  # many changes: sort anew
            new._rebuild()
            return new
        new.jkeys, new.jheads = list(self.jkeys), list(self.jheads)
        new.pending, new._head_key = set(self.pending), dict(self._head_key)
        new._update(keys, threads)
        return new

    def _update(self, keys: set[Key], threads: set[str]) -> None:
        for key in keys:
            at = bisect.bisect_left(self.jkeys, key)
            there = at < len(self.jkeys) and self.jkeys[at] == key
            if self.status(key) is True and not there:
                self.jkeys.insert(at, key)
            elif self.status(key) is not True and there:
                del self.jkeys[at]
        for thread in threads:
            old = self._head_key.pop(thread, None)
            if old is not None:
                del self.jheads[bisect.bisect_left(self.jheads, old)]
            self.pending.discard(thread)
            head = self.head(thread)
            if head is PENDING:
                self.pending.add(thread)
            elif isinstance(head, str):
                self._head_key[thread] = (head, thread)
                bisect.insort(self.jheads, (head, thread))

    def status(self, key: Key) -> bool | None:
        """Whether the journals say ``key`` may exist (True), is gone (False), or say
        nothing of it (None: the base says)."""
        for _, replay, _ in reversed(self.layers):
            found = replay.keys.get(key)
            if found is not None:
                return found
            if key[1] in replay.gone:
                return False
        return None

    def head(self, thread_id: str) -> Any:
        """The head the journals give ``thread_id`` (an id, None, :data:`PENDING`), or
        ``_BASE`` when they give none."""
        for _, replay, _ in reversed(self.layers):
            if thread_id in replay.heads:
                return replay.heads[thread_id]
        return _BASE

    def in_journal(self, thread_id: str) -> bool:
        return self.head(thread_id) is not _BASE

    # -- reading in order ----------------------------------------------------------------

    def entries_desc(self, bound: Key | None) -> Iterator[Key]:
        """Every checkpoint that may exist, below ``bound`` (all if None), greatest key
        first (checkpoint id, then thread, then namespace, all descending).

        Raises:
            CatalogDamage: a sorted file is damaged, or was replaced (see ``state``).
        """
        end = len(self.jkeys) if bound is None else bisect.bisect_left(self.jkeys, bound)
        journal = (self.jkeys[i] for i in range(end - 1, -1, -1))
        base = (
            key
            for key in cast(
                "Iterator[Key]", sorted_desc(self.folder, "checkpoints", self.state, bound)
            )
            if self.status(key) is None
        )
        return heapq.merge(journal, base, reverse=True)

    def heads_desc(self, bound: HeadKey | None) -> Iterator[HeadKey]:
        """Every thread's head that is an id below ``bound``, greatest first; threads whose
        head is pending are left out (see :attr:`pending`)."""
        end = len(self.jheads) if bound is None else bisect.bisect_left(self.jheads, bound)
        journal = (self.jheads[i] for i in range(end - 1, -1, -1))
        base = (
            key
            for key in cast(
                "Iterator[HeadKey]", sorted_desc(self.folder, "heads", self.state, bound)
            )
            if not self.in_journal(key[1])
        )
        return heapq.merge(journal, base, reverse=True)

    def contains(self, key: Key) -> bool:
        """Whether ``key`` is among :meth:`entries_desc`'s (a lookup: one bisection)."""
        found = self.status(key)
        if found is not None:
            return found
        upper = (key[0], key[1], key[2] + "\x00")  # the least key above ``key``
        return next(sorted_desc(self.folder, "checkpoints", self.state, upper, 1), None) == key


# -- verify(): the index against the threads ----------------------------------------------


@dataclass
class Contents:
    """Everything the index says: per thread, its checkpoints ``(namespace, id)`` and its
    head (an id, None, or :data:`PENDING`); or what is wrong with it. ``stamp`` tells
    whether the index changed since (see ``Catalog.stamp``)."""

    checkpoints: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    heads: dict[str, Any] = field(default_factory=dict)
    problem: CatalogDamage | None = None
    stamp: object = None


def contents(folder: Path, stamp: object) -> Contents:
    """Everything the index in ``folder`` says, each file checked whole."""
    found = Contents(stamp=stamp)
    try:
        state = read_state(folder)
        if state is None:
            raise CatalogDamage("the index is missing", folder / STATE)
        if state.damaged is not None:
            raise CatalogDamage(f"a writer found it damaged: {state.damaged}", folder / STATE)
        if state.base is None:
            raise CatalogDamage("its build was interrupted", folder / STATE)
        for (checkpoint_id, thread_id, ns), _ in read_sorted(folder, "checkpoints", state):
            found.checkpoints.setdefault(thread_id, set()).add((ns, checkpoint_id))
        found.heads = {t: c for (c, t), _ in read_sorted(folder, "heads", state)}
        for generation in state.journals():
            tail = JournalTail(journal_path(folder, generation), generation)
            replay = Replay()
            for record in tail.read():
                replay.apply(record, tail.path)
            for thread_id in replay.gone:
                found.checkpoints.pop(thread_id, None)
            for (checkpoint_id, thread_id, ns), there in replay.keys.items():
                keys = found.checkpoints.setdefault(thread_id, set())
                (keys.add if there else keys.discard)((ns, checkpoint_id))
            found.heads.update(replay.heads)
    except CatalogDamage as damage:
        found.problem = damage
    return found


class Audit:
    """The index checked against each thread in turn (``verify()``, which holds the
    thread's locks meanwhile): it is *behind* where a thread has a checkpoint it lacks, or
    a newer head than it names (not pending) — damage: a listing could miss it —; it is
    *ahead* where it names checkpoints, heads or threads that are not there, or heads
    still pending (what a killed writer leaves, and what reads check: no damage, but a
    repair rebuilds it). A thread that disagrees is checked again against the index read
    anew, if it changed meanwhile (a change made between the two reads is no damage).

    A thread whose folder is missing while the index gives it a newest root checkpoint
    (not pending) is *gone*: damage, since no writer leaves that (a delete marks the head
    pending before it removes the folder), so the thread's checkpoints were lost."""

    def __init__(self, load: Callable[[], Contents], stamp: Callable[[], object]) -> None:
        self._load = load
        self._stamp = stamp
        self.contents = load()
        self.ahead = False
        self.behind: list[str] = []
        self.gone: list[tuple[str, str]] = []  # (thread id, the head the index gives it)
        self._seen: set[str] = set()

    def check(self, thread_id: str, checkpoints: Mapping[str, Sequence[str]], head: Any) -> None:
        """Compare the index with one thread: its checkpoints by namespace, its head."""
        if self.contents.problem is not None:
            return
        self._seen.add(thread_id)
        if self._disagrees(thread_id, checkpoints, head):
            if self._stamp() != self.contents.stamp:
                self.contents = self._load()
                if self.contents.problem is not None:
                    return
            if self._disagrees(thread_id, checkpoints, head):
                self.behind.append(thread_id)

    def unseen(self) -> list[str]:
        """The threads the index gives a newest root checkpoint that :meth:`check` was not
        given (their folders may be gone: see :meth:`missing`)."""
        if self.contents.problem is not None:
            return []
        heads = self.contents.heads
        return sorted(
            t for t, head in heads.items() if isinstance(head, str) and t not in self._seen
        )

    def missing(self, thread_id: str) -> None:
        """The folder of ``thread_id`` is missing (the caller holds the thread's locks):
        note it as *gone* if the index, read anew if it changed, still gives the thread a
        newest root checkpoint."""
        if self._stamp() != self.contents.stamp:
            self.contents = self._load()
        head = self.contents.heads.get(thread_id)
        if self.contents.problem is None and isinstance(head, str):
            self.gone.append((thread_id, head))

    def _disagrees(
        self, thread_id: str, checkpoints: Mapping[str, Sequence[str]], head: Any
    ) -> bool:
        """Whether the index is behind ``thread_id`` (noting in :attr:`ahead` whether it
        is ahead of it)."""
        indexed = self.contents.checkpoints.get(thread_id, set())
        there = {(ns, i) for ns, ids in checkpoints.items() for i in ids}
        indexed_head = self.contents.heads.get(thread_id)
        if PENDING in (head, indexed_head):
            self.ahead |= indexed_head is PENDING
            behind_head = False
        else:
            behind_head = head is not None and (indexed_head is None or indexed_head < head)
            self.ahead |= indexed_head is not None and (head is None or indexed_head > head)
        self.ahead |= bool(indexed - there)
        return behind_head or not there <= indexed

    def findings(self) -> list[tuple[str, Path | None]]:
        """What is wrong with the index: ``(reason, path)`` (path None: the whole index)."""
        if self.contents.problem is not None:
            return [(self.contents.problem.reason, self.contents.problem.path)]
        others = set(self.contents.checkpoints) | set(self.contents.heads)
        self.ahead |= any(
            t not in self._seen and (self.contents.checkpoints.get(t) or self.contents.heads.get(t))
            for t in others
        )
        if not self.behind:
            return []
        shown = ", ".join(repr(t) for t in sorted(self.behind)[:5])
        more = ", ..." if len(self.behind) > 5 else ""
        reason = (
            f"the index is behind {len(self.behind)} threads ({shown}{more}): it lacks "
            "checkpoints they have, or names an older newest root checkpoint"
        )
        return [(reason, None)]

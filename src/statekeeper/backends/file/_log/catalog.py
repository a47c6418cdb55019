"""The directory's index (``index/``, see :mod:`.catalog_files`): kept by every write,
compacted, rebuilt, and read as one :class:`~.catalog_view.View`.

Why it can be trusted, and when it is not:

* **A change is announced before it is made.** A ``put`` appends its checkpoint's line
  (``{"t", "n", "c"}``) to the journal before the checkpoint's own line is committed; a
  change that may lower a thread's head (deleting, pruning, copying into it) appends
  ``{"t", "pending": true}`` before it. What the change removes, and the head it leaves,
  are appended after it. So a process killed at any instant leaves the index ahead (a
  checkpoint announced but never stored, a head still pending), never behind: readers
  check what it says against the threads' own logs and read a pending head themselves.
* **Writers hold the index's lock shared** (``locks/@index``) from their announcement to
  the end of their change; compacting or rebuilding takes it exclusively only to switch
  to a new journal (a *rotation*), which waits for the changes in flight, so every change
  announced in the old journal is committed before a rebuild reads the threads, and a
  compaction finds only killed writers' changes still pending there. A gate
  (``locks/@index-gate``), which writers pass shared before taking the shared lock and a
  rotation holds exclusively while it waits, lets a waiting rotation in first.
  Appends are serialised by ``locks/@index-append`` (microseconds), so each journal line
  names the one before it and the journal has a head like any log. At most one process
  compacts or rebuilds at a time (``locks/@index-build``).
* **Lines are not flushed one by one** (a ``put`` still flushes once). Only a restart of
  the machine can lose them, so the state records the boot id they were written under, and
  an index of another boot is rebuilt by the first read-write open before it is used
  (read-only, it is not used). Where there is no boot id, the announcements are flushed.
* **Growth is bounded.** When the journal outgrows ``max(128 KiB, 1/16 of the sorted
  files)``, the writer that crossed it compacts: rotates, merges the frozen journal into
  new sorted files (resolving killed writers' pending heads from their threads), and
  replaces the state; so the index holds each live checkpoint and thread once, plus at
  most that much journal.

An index that is missing, damaged, being built or of another boot makes :meth:`Catalog.view`
return None: callers then read every thread, as without an index.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple, cast

from statekeeper._storage.files import sync_dir
from statekeeper.backends.file._log.catalog_files import (
    FOLDER,
    KINDS,
    STATE,
    CatalogDamage,
    State,
    base_path,
    create_journal,
    current_boot,
    journal_path,
    read_sorted,
    read_state,
    sorted_line,
    write_sorted,
    write_state,
)
from statekeeper.backends.file._log.catalog_view import (
    PENDING,
    Contents,
    JournalTail,
    Key,
    Replay,
    View,
    contents,
)
from statekeeper.backends.file._log.catalog_write import (
    APPEND,
    BUILD,
    GATE,
    SHARED,
    Change,
    lock,
    mark_pending,
    threshold,
)
from statekeeper.backends.file._log.head import SUFFIX, head_path
from statekeeper.errors import StatekeeperError, StorageError

__all__ = ["Catalog", "Change", "Scanned"]

log = logging.getLogger("statekeeper.backends.file.checkpointer")
_ATTEMPTS = 3  # readings of an index that a compaction replaced meanwhile
# why an index built from threads some of which could not be read is not used (until a
# verify(quarantine=True) moves them aside, and rebuilds it)
_UNREADABLE = "some threads could not be read when it was built: "


class Scanned(NamedTuple):
    """One thread folder as a rebuild reads it: its id, the ids of the checkpoints of each
    namespace, its head (:data:`~.catalog_view.PENDING`: it could not be read, so readers
    read it themselves). ``thread_id`` None: the folder could not be read (``problem``)."""

    thread_id: str | None
    checkpoints: Mapping[str, Sequence[str]]
    head: Any
    problem: str | None = None


Scan = Callable[[], Iterator[Scanned]]
RealHead = Callable[[str], str | None]


class Catalog:
    """The index of the directory at ``root`` (see the module docstring). ``read_only``:
    never written; ``durable``: flushed as the checkpoints are."""

    def __init__(self, root: Path, *, read_only: bool, durable: bool, lock_timeout: float):
        self.folder = root / FOLDER
        self.used = True  # False: the directory predates the index (read as it is)
        self.read_only = read_only
        self.durable = durable
        self.boot = current_boot()
        self._locks = {name: str(root / "locks" / name) for name in (GATE, SHARED, APPEND, BUILD)}
        self._timeout = lock_timeout
        self._mutex = threading.Lock()  # guards the cached view
        self._view: View | None = None
        self._stamp: object = None
        self._tails: dict[int, tuple[JournalTail, Replay]] = {}
        self._warned: set[str] = set()

    def lock(self, name: str, **kw: Any) -> contextlib.AbstractContextManager[bool]:
        """Hold the index lock ``name`` (see :func:`.catalog_write.lock`)."""
        return lock(self._locks[name], self._timeout, **kw)

    def warn(self, reason: str) -> None:
        """Log (once per reason) that the index is not used and why."""
        if reason not in self._warned:
            self._warned.add(reason)
            log.warning("the index is not used, every thread is read instead: %s", reason)

    # -- reading ------------------------------------------------------------------------

    def view(self) -> View | None:
        """The index as it is now (the live journal read up to its end); None when it
        cannot be trusted: missing, damaged, being built, or written under another boot
        (then it is logged, once per reason, when that is damage)."""
        if not self.used:
            return None
        for _ in range(_ATTEMPTS):
            stamp = self._state_stamp()
            try:
                with self._mutex:
                    return self._current()
            except CatalogDamage as damage:
                if self._state_stamp() == stamp:
                    self.warn(str(damage))
                    return None
                # the state changed meanwhile: a compaction removed what it had replaced
        return None

    def _state_stamp(self) -> object:
        try:
            found = (self.folder / STATE).stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        return (found.st_ino, found.st_mtime_ns, found.st_size)

    def _current(self) -> View | None:
        stamp = self._state_stamp()
        if stamp is None:
            raise CatalogDamage("the index is missing", self.folder / STATE)
        view = self._view
        if view is None or stamp != self._stamp:
            state = read_state(self.folder)
            if state is None:
                raise CatalogDamage("the index is missing", self.folder / STATE)
            if state.damaged is not None:
                raise CatalogDamage(f"a writer found it damaged: {state.damaged}", self.folder)
            if self.unusable(state) is not None:
                return None  # being built, or of another boot: rebuilt by a read-write open
            layers = []
            for generation in state.journals():
                tail, replay = self._tails.get(generation) or (
                    JournalTail(journal_path(self.folder, generation), generation),
                    Replay(),
                )
                replay = Replay(replay)  # views made before keep theirs
                for record in tail.read():
                    replay.apply(record, tail.path)
                layers.append((tail, replay, tail.size))
            self._tails = {g: (t, r) for g, (t, r, _) in zip(state.journals(), layers, strict=True)}
            view = View(self.folder, state, layers)
        else:
            tail = view.layers[-1][0]
            if records := tail.read():
                view = view.advanced(records)
                self._tails[view.state.journal] = (tail, view.layers[-1][1])
        self._view, self._stamp = view, stamp
        return view

    def unusable(self, state: State) -> str | None:
        """Why an index in ``state`` cannot be used (None: it can)."""
        if state.damaged is not None:
            return f"it is damaged: {state.damaged}"
        if state.base is None:
            return "it is being built (or its build was interrupted)"
        if state.boot != self.boot:
            return "it was written before this machine restarted"
        return None

    def contents(self) -> Contents:
        """Everything the index says, every file checked whole (for ``verify()``)."""
        return contents(self.folder, self.stamp())

    def stamp(self) -> object:
        """What changes when the index changes (the state, the live journal's size)."""
        sizes = []
        with contextlib.suppress(OSError, CatalogDamage):
            state = read_state(self.folder)
            if state is not None:
                sizes.append(journal_path(self.folder, state.journal).stat().st_size)
        return (self._state_stamp(), sizes)

    # -- writing ------------------------------------------------------------------------

    @contextlib.contextmanager
    def change(self, thread_id: str, head_of: Callable[[], str | None]) -> Iterator[Change]:
        """Record in the index a change of ``thread_id`` made in the block (see
        :class:`Change`); ``head_of`` reads the thread's head once the change is made. The
        caller holds the thread's locks."""
        change = Change(self, thread_id, head_of)
        try:
            yield change
        except BaseException:
            change.finish(ok=False)
            raise
        change.finish(ok=True)

    def compact(self, change: Change, real_head: RealHead) -> None:
        """Compact the index if ``change`` found its journal past the threshold (the caller
        holds no thread's lock). Skipped when another process compacts or rebuilds."""
        if not change.due or self.read_only:
            return
        try:
            self._compact(real_head)
        except (OSError, StorageError) as exc:  # retried by the next writer past the threshold
            log.warning("compacting the index failed: %s", exc)

    def _compact(self, real_head: RealHead) -> None:
        with self.lock(BUILD, wait=False) as held:
            if not held:
                return
            try:
                state = read_state(self.folder)
            except CatalogDamage:
                return
            if state is None or self.unusable(state) is not None:
                return
            if state.frozen is None:
                if not self._due(state):
                    return  # another process compacted meanwhile
                state = self._rotate(state, fresh=False)
            try:
                self._merge(state, real_head)
            except CatalogDamage as damage:  # stop trusting it: readers scan, repair rebuilds
                write_state(self.folder, replace(state, damaged=str(damage)), durable=self.durable)
                self.warn(str(damage))

    def _due(self, state: State) -> bool:
        try:
            size = journal_path(self.folder, state.journal).stat().st_size
        except OSError:
            return False
        return size > threshold(state)

    def _rotate(self, state: State | None, *, fresh: bool) -> State:
        """Start a new live journal, once the changes in flight are done (exclusive lock):
        the old one is frozen (``fresh`` False: a compaction) or dropped with the base
        (``fresh``: a rebuild, the new state has no base until it is built)."""
        generation = max(_journals(self.folder) | {state.journal if state else 0}) + 1
        path = journal_path(self.folder, generation)
        with self.lock(GATE), self.lock(SHARED):
            create_journal(path, generation, durable=self.durable)
            if self.durable:
                sync_dir(self.folder)
            if fresh or state is None:
                new = State(generation, boot=self.boot)
            else:
                new = replace(state, journal=generation, frozen=state.journal)
            write_state(self.folder, new, durable=self.durable)
        return new

    def _merge(self, state: State, real_head: RealHead) -> None:
        """Merge the base and the frozen journal of ``state`` into new sorted files, and
        install them."""
        assert state.frozen is not None
        tail = JournalTail(journal_path(self.folder, state.frozen), state.frozen)
        replay = Replay()
        for record in tail.read():
            replay.apply(record, tail.path)

        def kept(key: tuple[str, ...]) -> bool:
            found = replay.keys.get(cast("Key", key))
            return found is None and key[1] not in replay.gone

        # the lines the journal leaves as they were are copied as they are
        lines = [(k, raw) for k, raw in read_sorted(self.folder, "checkpoints", state) if kept(k)]
        lines += [(k, sorted_line(k)) for k, there in replay.keys.items() if there]
        heads = [(k, raw) for k, raw in read_sorted(self.folder, "heads", state)]
        heads = [(k, raw) for k, raw in heads if k[1] not in replay.heads]
        unresolved = []
        for thread_id, head in replay.heads.items():
            if head is PENDING:  # its writer was killed: what is the head now?
                try:
                    head = real_head(thread_id)
                except (StatekeeperError, OSError):
                    unresolved.append(thread_id)
                    continue
            if isinstance(head, str):
                heads.append(((head, thread_id), sorted_line((head, thread_id))))
        lines.sort(key=lambda item: item[0])
        heads.sort(key=lambda item: item[0])
        self._install(state, state.journal, lines, heads, unresolved)

    def _install(
        self,
        state: State,
        generation: int,
        checkpoints: Sequence[tuple[tuple[str, ...], bytes]],
        heads: Sequence[tuple[tuple[str, ...], bytes]],
        unresolved: Sequence[str],
        damaged: str | None = None,
    ) -> None:
        """Write the sorted files of ``generation`` (``(key, line)`` in order), point the
        state at them, append the threads whose head is still unknown as pending, and
        remove what is left over."""
        files = {
            kind: write_sorted(
                base_path(self.folder, kind, generation),
                kind,
                generation,
                (raw for _, raw in found),
                durable=self.durable,
            )
            for kind, found in (("checkpoints", checkpoints), ("heads", heads))
        }
        if self.durable:
            sync_dir(self.folder)
        new = replace(state, frozen=None, base=generation, files=files, damaged=damaged)
        write_state(self.folder, new, durable=self.durable)
        mark_pending(self, unresolved)  # readers read these threads' heads themselves
        self._remove_others(new)

    def _remove_others(self, state: State) -> None:
        """Remove the files of the index that ``state`` does not name (the caller holds the
        build lock, so none is being written)."""
        wanted = {STATE} | {base_path(self.folder, k, state.base or 0).name for k in KINDS}
        for generation in state.journals():
            wanted |= {f"journal-{generation}", f"journal-{generation}{SUFFIX}"}
        for name in _names(self.folder):  # temporary files too: only we write here
            if name not in wanted:
                with contextlib.suppress(OSError):
                    (self.folder / name).unlink()

    # -- building -----------------------------------------------------------------------

    def stale(self) -> str | None:
        """Why the index must be rebuilt before it is used (None: it need not), from its
        state alone (cheap: read at every read-write open)."""
        try:
            state = read_state(self.folder)
        except CatalogDamage as damage:
            return str(damage)
        if state is None:
            return "there is none yet"
        if (state.damaged or "").startswith(_UNREADABLE):
            return None  # a rebuild would meet the same threads: verify() reports them
        if (reason := self.unusable(state)) is not None:
            return reason
        journals = [journal_path(self.folder, g) for g in state.journals()]
        for path in [
            *(base_path(self.folder, kind, state.base or 0) for kind in KINDS),
            *journals,
            *(head_path(journal) for journal in journals),
        ]:
            if not path.exists():
                return f"{path.name} is missing"
        return None

    def rebuild(self, scan: Scan, *, wait: bool, only_if_stale: bool = False) -> bool:
        """Build the index anew from the threads (``scan``); False if another process holds
        the build lock and ``wait`` is False, or (``only_if_stale``) it needed no rebuild."""
        with self.lock(BUILD, wait=wait) as held:
            if not held or (only_if_stale and self.stale() is None):
                return False
            created = not self.folder.exists()
            self.folder.mkdir(exist_ok=True)
            if created and self.durable:
                sync_dir(self.folder.parent)
            try:
                old = read_state(self.folder)
            except CatalogDamage:
                old = None
            state = self._rotate(old, fresh=True)
            self._remove_others(state)
            keys: list[tuple[str, ...]] = []
            heads: dict[str, str] = {}
            unresolved, problems = [], []
            for found in scan():
                if found.thread_id is None:
                    problems += [found.problem] if found.problem else []
                    continue
                for ns, ids in found.checkpoints.items():
                    keys += [(checkpoint_id, found.thread_id, ns) for checkpoint_id in ids]
                if found.head is PENDING:
                    unresolved.append(found.thread_id)
                elif isinstance(found.head, str):
                    heads[found.thread_id] = found.head
            damaged = f"{_UNREADABLE}{'; '.join(problems[:3])}" if problems else None
            self._install(
                state,
                state.journal,
                [(k, sorted_line(k)) for k in sorted(set(keys))],
                [
                    ((c, t), sorted_line((c, t)))
                    for c, t in sorted((c, t) for t, c in heads.items())
                ],
                unresolved,
                damaged,
            )
        return True


def _names(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)  # noqa: PTH208 - names, not Path objects
    except (FileNotFoundError, NotADirectoryError):
        return []


def _journals(folder: Path) -> set[int]:
    """The generations of the journals in ``folder`` (their heads and leftovers too)."""
    found = set()
    for name in _names(folder):
        digits = name.removeprefix("journal-").removesuffix(SUFFIX)
        if name.startswith("journal-") and digits.isdigit():
            found.add(int(digits))
    return found

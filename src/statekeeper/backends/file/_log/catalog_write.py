"""Writing the directory's index (:mod:`.catalog`): its locks, and :class:`Change`, the
record one change of a thread leaves in the journal.

A change is announced before it is made, and confirmed after (see :mod:`.catalog`): a
``put`` appends its checkpoint's line, then the thread's new head; deleting or pruning
appends ``pending``, then what it deleted and the head it left. The announcement is
appended under the shared lock, which is held to the end of the change.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from statekeeper._storage.files import storage_error
from statekeeper.backends.file._log.catalog_files import (
    CatalogDamage,
    JournalWriter,
    State,
    journal_path,
    read_state,
)
from statekeeper.errors import StatekeeperError, StorageError

if TYPE_CHECKING:
    from statekeeper.backends.file._log.catalog import Catalog

__all__ = ["APPEND", "BUILD", "GATE", "SHARED", "Change", "lock", "mark_pending", "threshold"]

SHARED, GATE, APPEND, BUILD = "@index", "@index-gate", "@index-append", "@index-build"
_JOURNAL_MIN = 128 * 1024  # bytes of journal before a compaction, at least
_IDS_PER_LINE = 64  # a long list of ids is split, so no line is large

# the descriptors of held index locks (fd -> holding thread): a forked child closes the
# other threads' ones, so it never keeps their locks held (see _storage.files.KeyLocks)
_held: dict[int, int] = {}


def _after_fork_in_child() -> None:
    forking = threading.get_ident()
    for fd, holder in list(_held.items()):
        if holder != forking:
            del _held[fd]
            with contextlib.suppress(OSError):
                os.close(fd)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@contextlib.contextmanager
def lock(path: str, timeout: float, *, shared: bool = False, wait: bool = True) -> Iterator[bool]:
    """Hold the flock of ``path`` (shared or exclusive) for the block: one descriptor of
    its own, so threads of this process exclude each other too. Yields False, holding
    nothing, if ``wait`` is False and it is taken.

    Raises:
        StorageError: it stayed taken for ``timeout`` seconds.
    """
    import fcntl

    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise storage_error(exc, "open the lock file", path) from exc
    _held[fd] = threading.get_ident()
    try:
        deadline, pause = time.monotonic() + timeout, 0.0001  # held for microseconds
        operation = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB
        while not _flock(fd, operation):
            if not wait:
                break
            if time.monotonic() >= deadline:
                raise StorageError(
                    f"waited {timeout:g} s for the index lock {path!r}: another "
                    "process or thread held it; retry later, or raise lock_timeout"
                )
            time.sleep(pause)  # flock cannot wait with a timeout: poll, backing off
            pause = min(pause * 2, 0.02)
        else:
            yield True
            return
        yield False
    finally:
        del _held[fd]
        os.close(fd)


def _flock(fd: int, operation: int) -> bool:
    import fcntl

    try:
        fcntl.flock(fd, operation)
    except BlockingIOError:
        return False
    return True


def threshold(state: State) -> int:
    """How large the journal may grow before it is compacted: ``max(128 KiB, 1/16 of the
    sorted files)``, so a fresh reader parses little and a compaction, which rewrites the
    sorted files, happens once per sixteenth of them written."""
    return max(_JOURNAL_MIN, sum(found[0] for found in state.files.values()) // 16)


class Change:
    """The index's record of one change of a thread, made under the thread's locks.

    Before the change: :meth:`intent` (checkpoints about to be stored) and :meth:`pending`
    (the head is about to change) are appended at once, under the shared lock taken then
    and held to the end. After it: :meth:`drop`, :meth:`gone` and :meth:`head` are
    appended together when the block ends; if the head was pending and not given, it is
    read (``head_of``). A failed announcement fails the change (a ``StorageError``); what
    is appended after it may be lost (the index then stays ahead, which readers check).
    """

    def __init__(self, catalog: Catalog, thread_id: str, head_of: Callable[[], str | None]):
        self.catalog = catalog
        self.thread_id = thread_id
        self.due = False  # the journal has outgrown its threshold: compact after the change
        self._head_of = head_of
        self._stack = contextlib.ExitStack()
        self._writer: JournalWriter | None = None
        self._state: State | None = None
        self._opened = False
        self._after: list[dict[str, Any]] = []
        self._pending = False
        self._resolved = False

    def _open(self) -> None:
        """Take the shared lock (through the gate), read the state, open the journal."""
        if self._opened:
            return
        self._opened = True
        catalog = self.catalog
        # through the gate, shared among writers: a rotation waiting there goes first
        with catalog.lock(GATE, shared=True):
            self._stack.enter_context(catalog.lock(SHARED, shared=True))
        try:
            self._state = read_state(catalog.folder)
        except CatalogDamage:
            return  # readers find the same damage; a rebuild writes a new state
        if self._state is None or self._state.damaged is not None:
            return
        try:
            self._writer = JournalWriter(journal_path(catalog.folder, self._state.journal))
        except (FileNotFoundError, NotADirectoryError):
            return
        self._stack.callback(self._writer.close)

    def _append(self, records: list[dict[str, Any]], *, before: bool) -> None:
        self._open()
        if self._writer is None or self._state is None:
            return
        catalog = self.catalog
        flush = before and catalog.durable and not catalog.boot  # see current_boot()
        try:
            with catalog.lock(APPEND):
                end = self._writer.append(records, durable=flush)
        except CatalogDamage as damage:
            catalog.warn(str(damage))
            self._writer = None
            return
        except (OSError, StorageError) as exc:
            if not before:  # the change is made: the index stays ahead, which is checked
                return
            if isinstance(exc, StorageError):
                raise
            raise storage_error(exc, "update the index", self._writer.path) from exc
        self.due = end > threshold(self._state)

    def intent(self, ns: str, ids: Sequence[str]) -> None:
        """These checkpoints of namespace ``ns`` are about to be stored."""
        if self.catalog.read_only or not ids:
            return
        self._append(
            [
                {"c": list(ids[i : i + _IDS_PER_LINE]), "n": ns, "t": self.thread_id}
                for i in range(0, len(ids), _IDS_PER_LINE)
            ],
            before=True,
        )
        self._pending |= ns == ""

    def pending(self) -> None:
        """The thread's head is about to change."""
        if self.catalog.read_only or self._pending:
            return
        self._append([{"pending": True, "t": self.thread_id}], before=True)
        self._pending = True

    def head(self, checkpoint_id: str | None) -> None:
        """The thread's head is now ``checkpoint_id`` (None: it has no root checkpoint)."""
        self._after.append({"h": checkpoint_id, "t": self.thread_id})
        self._resolved = True

    def drop(self, ns: str, ids: Sequence[str]) -> None:
        """These checkpoints of namespace ``ns`` were deleted."""
        for i in range(0, len(ids), _IDS_PER_LINE):
            self._after.append(
                {"drop": list(ids[i : i + _IDS_PER_LINE]), "n": ns, "t": self.thread_id}
            )

    def gone(self) -> None:
        """The thread was deleted."""
        self._after.append({"gone": True, "t": self.thread_id})
        self._resolved = True

    def finish(self, *, ok: bool) -> None:
        """Append what the change left (its head read if it was pending and not given),
        then release the lock."""
        try:
            if self.catalog.read_only:
                return
            if ok and self._pending and not self._resolved:
                with contextlib.suppress(StatekeeperError, OSError):
                    self.head(self._head_of())
            if self._after:
                with contextlib.suppress(StorageError):  # the lock timed out: stays ahead
                    self._append(self._after, before=False)
        finally:
            self._stack.close()


def mark_pending(catalog: Catalog, threads: Sequence[str]) -> None:
    """Append that these threads' heads are pending (a rebuild or a compaction could not
    read them): readers then read them from the threads themselves."""
    if not threads:
        return
    change = Change(catalog, threads[0], lambda: None)
    try:
        change._append([{"pending": True, "t": t} for t in threads], before=False)
    finally:
        change.finish(ok=False)

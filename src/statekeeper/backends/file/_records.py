"""The directory of a file checkpointer, and the operations that span namespaces
(deleting and copying a whole thread folder are in :mod:`._directory`).

::

    <root>/statekeeper.json                   {"format": "statekeeper-file", "version": 4}
    <root>/threads/<thread>/@namespaces       the thread's manifest (_log.manifest)
    <root>/threads/<thread>/<namespace>/      one folder per (thread, namespace); names
        checkpoints, checkpoints.head         from _layout.file_name; the files in
        writes, writes.head                   it are described in _namespace
        values/<channel>@<version>
    <root>/locks/<thread>                     flock targets: the thread's checkpoints,
    <root>/locks/<thread>@writes              and its pending writes
    <root>/quarantine/                        damaged files moved aside by verify()
    <root>/trash/                             threads being deleted or copied
    <root>/claims/                            run claims (claim_thread), by hashed thread id
    <root>/index/                             the threads and checkpoints, newest first
                                              (_log.catalog: what listings read)

Value files are written through a temporary file and a rename and never modified in
place, so a copied thread shares them through hard links; the ``checkpoints`` and
``writes`` logs are only appended to or replaced, and a copy gets its own.
"""

from __future__ import annotations

import contextlib
import logging
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from statekeeper._storage.files import KeyLocks, storage_error
from statekeeper._storage.files import sync_dir as _sync_dir
from statekeeper.backends.file._directory import (
    HEADS,
    VERSION,
    WRITES_LOCK,
    open_directory,
    thread_locks,
    trash_lock,
    trash_name,
)
from statekeeper.backends.file._layout import (
    decode_name,
    file_name,
    is_hashed,
)
from statekeeper.backends.file._log import write as _log
from statekeeper.backends.file._log.catalog import Catalog
from statekeeper.backends.file._log.lines import CHECKPOINTS, WRITES, DamagedIndex, Entry
from statekeeper.backends.file._log.manifest import listed, write_manifest
from statekeeper.backends.file._log.view import IndexView
from statekeeper.backends.file._namespace import (
    SUBDIRS,
    Namespace,
    corrupt_error,
    names_in,
    reporting,
)
from statekeeper.backends.file._retire import replace
from statekeeper.errors import CorruptCheckpointError, Damage, StorageError

__all__ = ["CLAIMS_DIR", "Store", "thread_locks", "trash_lock", "trash_name"]

# Beside threads/, never inside it: no thread, namespace or lock name can be this folder.
CLAIMS_DIR = "claims"
_NAMESPACES = 4096  # namespaces whose paths are kept (a function of the ids: never stale)
log = logging.getLogger("statekeeper.backends.file.checkpointer")


class Store:
    """The directory of one file checkpointer (see the module docstring).

    ``lenient`` (``on_corrupt="fallback"``) logs and skips damaged checkpoint lines
    instead of raising; ``durable`` (``fsync=True``) flushes every write to disk;
    ``read_only`` (``mode="ro"``, also set when the directory is not writable) creates
    and changes nothing. ``heads`` says whether the logs have heads (format 3; a format
    2 directory opened read-only has none).
    """

    def __init__(
        self, root: Path, lock_timeout: float, *, lenient: bool, durable: bool, read_only: bool
    ):
        self.root = root
        self.lenient = lenient
        self.durable = durable
        self.threads = root / "threads"
        self._namespaces: dict[tuple[str, str], Namespace] = {}
        self.quarantine = root / "quarantine"
        self.trash = root / "trash"
        self.locks = KeyLocks(root / "locks", lock_timeout)  # fails first where no flock
        try:
            opened = open_directory(root, read_only=read_only, durable=durable, locks=self.locks)
        except OSError as exc:
            raise storage_error(exc, "set up the checkpoint directory", root) from exc
        self.read_only = opened.read_only
        self.heads = opened.version >= HEADS  # (a format 2 directory read as it is has none)
        self.catalog = Catalog(
            root, read_only=self.read_only, durable=durable, lock_timeout=lock_timeout
        )
        self.catalog.used = opened.version >= VERSION  # else read as it is: listings scan

    def sync(self, *folders: Path) -> None:
        """Make the creations, renames and removals in ``folders`` durable."""
        for folder in folders if self.durable else ():
            try:
                _sync_dir(folder)
            except OSError as exc:
                raise storage_error(exc, "flush the directory", folder) from exc

    # -- naming and discovery ----------------------------------------------------------

    def lock(self, *thread_ids: str) -> contextlib.AbstractContextManager[None]:
        """Hold both write locks of these threads (taken in a fixed order): what deleting,
        copying or rewriting anything of a thread needs."""
        return self.locks.hold(*(name for t in thread_ids for name in thread_locks(file_name(t))))

    def checkpoints_lock(self, thread_id: str) -> contextlib.AbstractContextManager[None]:
        """Hold the lock of a thread's ``checkpoints`` and ``values/`` files (``put``)."""
        return self.locks.hold(file_name(thread_id))

    def writes_lock(self, thread_id: str) -> contextlib.AbstractContextManager[None]:
        """Hold the lock of a thread's ``writes`` logs (``put_writes``), so that a task's
        writes are stored while the next checkpoint is."""
        return self.locks.hold(file_name(thread_id) + WRITES_LOCK)

    def thread_dir(self, thread_id: str) -> Path:
        return self.threads / file_name(thread_id)

    def namespace(self, thread_id: str, ns: str) -> Namespace:
        """The (thread, namespace), the same object for the same ids while it is kept, so
        that its paths are built once rather than at every call."""
        found = self._namespaces.get((thread_id, ns))
        if found is None:
            if len(self._namespaces) >= _NAMESPACES:
                self._namespaces.clear()
            folder = self.thread_dir(thread_id) / file_name(ns)
            found = Namespace(thread_id, ns, folder, self.durable, self.heads)
            self._namespaces[thread_id, ns] = found
        return found

    def threads_problem(self) -> str | None:
        """What is wrong with the ``threads`` folder: None if it is a folder (or missing,
        as before a read-write open creates it)."""
        try:
            if stat.S_ISDIR(self.threads.stat().st_mode):
                return None
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"cannot be read ({exc.strerror or exc})"
        return "is not a folder"

    def check_threads(self) -> None:
        """Raise StorageError if the ``threads`` folder is not one: reads and listings
        must not take damaged storage for storage without threads.

        Raises:
            StorageError: it is there but not a folder, or cannot be read; the message
                names its path.
        """
        if (problem := self.threads_problem()) is not None:
            raise StorageError(
                f"{str(self.threads)!r} {problem}: the checkpoint directory is damaged and "
                "no thread can be read; run verify() to list the damage, or restore a backup"
            )

    def thread_ids(self) -> list[str]:
        """Every thread that has a namespace folder with a ``checkpoints`` file.

        Raises:
            StorageError: the ``threads`` folder is not one (:meth:`check_threads`).
        """
        self.check_threads()
        found = []
        for name in names_in(self.threads):
            if not is_hashed(name):
                with contextlib.suppress(ValueError):
                    found.append(decode_name(name))
                continue
            for ns_name in names_in(self.threads / name):
                header = self._header(self.threads / name / ns_name / "checkpoints")
                if header is not None:
                    found.append(header["thread_id"])
                    break
        return found

    def namespaces(self, thread_id: str) -> list[Namespace]:
        """The namespaces of ``thread_id`` that have a ``checkpoints`` file, and those its
        manifest lists whose folder or logs are gone (reading them raises).

        Raises:
            CorruptCheckpointError: a shortened folder's header, or the manifest, is
                damaged.
            StorageError: none was found, and the ``threads`` folder is not one.
        """
        thread_dir = self.thread_dir(thread_id)
        found = []
        for name in names_in(thread_dir):
            if is_hashed(name) or is_hashed(thread_dir.name):
                header = self._header(thread_dir / name / "checkpoints")
                if header is None:
                    continue
                n = self.namespace(thread_id, header["checkpoint_ns"])
                if header["thread_id"] != thread_id or file_name(n.ns) != name:
                    n = Namespace(thread_id, n.ns, thread_dir / name, self.durable, self.heads)
                    raise corrupt_error(
                        n, None, n.index, "its header names another thread", "index"
                    )
                found.append(n)
                continue
            try:
                n = self.namespace(thread_id, decode_name(name))
            except ValueError:
                continue  # not ours (a stray file a user or tool left)
            if n.index.exists():
                found.append(n)
        if self.heads:
            found += self._listed_but_gone(thread_id, {n.ns for n in found})
        if not found:
            self.check_threads()
        return found

    def _listed_but_gone(self, thread_id: str, present: set[str]) -> list[Namespace]:
        """Namespaces the thread's manifest lists that are not in ``present``."""
        try:
            names = listed(self.thread_dir(thread_id), thread_id)
        except DamagedIndex as damage:
            if self.lenient:
                log.warning("skipping the damaged manifest of thread %r: %s", thread_id, damage)
                return []
            n = self.namespace(thread_id, "")
            raise corrupt_error(n, None, n.dir.parent, str(damage), "index") from None
        return [self.namespace(thread_id, ns) for ns in sorted(names - present)]

    def scope(self, thread_id: str | None, ns: str | None) -> list[Namespace]:
        """The namespaces ``list`` reads: every one (no thread), every one of a thread
        (no namespace), or one."""
        if thread_id is None:
            return [n for t in self.thread_ids() for n in self.namespaces(t)]
        if ns is None:
            return self.namespaces(thread_id)
        return [self.namespace(thread_id, ns)]

    def _header(self, index: Path) -> dict[str, Any] | None:
        try:
            with IndexView(index) as view:
                return view.header()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except DamagedIndex as exc:
            raise CorruptCheckpointError(
                f"{index}: {exc}; the full thread and namespace ids of this shortened folder "
                "name are only stored there: run verify(quarantine=True)",
                Damage(str(exc), backend="file", record="index", path=str(index)),
            ) from None

    # -- the checkpoints file ----------------------------------------------------------

    @contextlib.contextmanager
    def index(
        self, n: Namespace, *, writable: bool = False, again: bool = False
    ) -> Iterator[IndexView]:
        """``n``'s ``checkpoints`` file (``FileNotFoundError`` if there is none, and none
        was committed). A damaged or lost line raises CorruptCheckpointError or, when
        lenient, is logged and skipped (even on a writable view: a writer goes on from
        the intact lines; but never past lost lines, which a writer always raises for).
        A missing log that had lines raises CorruptCheckpointError. ``again``: the log
        was checked against its head moments ago by the same read, which only looks up
        lines by id now (a line lost since is then missing, which is damage too). A
        missing log where the ``threads`` folder is not one raises StorageError."""
        on_damage: Callable[[DamagedIndex], None] | None = None
        if self.lenient:

            def on_damage(damage: DamagedIndex) -> None:
                log.warning(
                    "%s is damaged: %s; reading what is intact (on_corrupt='fallback')",
                    n.index,
                    damage,
                )

        try:
            heads = self.heads and not again
            with IndexView(n.index, on_damage, writable=writable, heads=heads) as view:
                if is_hashed(n.dir.name) or is_hashed(n.dir.parent.name):
                    # a shortened name is not reversible: only the header says whose it is
                    header = view.header()
                    if (header.get("thread_id"), header.get("checkpoint_ns")) != (
                        n.thread_id,
                        n.ns,
                    ):
                        reason = "its header names another thread or namespace"
                        raise DamagedIndex(reason, record="index")
                yield view
        except DamagedIndex as damage:
            found = damage.checkpoint_id
            raise corrupt_error(n, found, n.index, str(damage), damage.record) from None
        except (FileNotFoundError, NotADirectoryError):
            self._missing_log(n)
            self.check_threads()
            raise

    def _missing_log(self, n: Namespace) -> None:
        """Raise CorruptCheckpointError if ``n``'s missing ``checkpoints`` log had lines
        (unless it is there now: a copy published the thread between the two reads)."""
        try:
            lost = n.missing(CHECKPOINTS)
        except DamagedIndex as damage:
            raise corrupt_error(n, None, n.dir.parent, str(damage), damage.record) from None
        if lost is not None and not n.index.exists():
            found = lost.damage
            raise corrupt_error(n, found.checkpoint_id, n.index, str(found), found.record)

    def newest(
        self,
        n: Namespace,
        below: str | None,
        checkpoint_id: str | None = None,
        page: int = 1,
        seen: dict[str, Entry] | None = None,
    ) -> Iterator[Entry]:
        """Checkpoints of ``n`` with ids below ``below`` (only ``checkpoint_id``, if given),
        newest first; deleted checkpoints' lines are skipped. Read in pages (``page`` lines,
        then four times more each time) from the end of the file, reopened per page, so no
        descriptor is held between items, a long history is never read whole, and a
        damaged old line is not met by a caller that only wanted the newest. Every line of
        a page read (deleted ones too) is put in ``seen``, if given, before the first of
        them is yielded: the older lines holding values of the newer ones often are there.
        A missing log whose lines were committed raises CorruptCheckpointError, unless
        lenient and no ``checkpoint_id`` is asked for: then it is logged and yields none."""
        while True:
            try:
                with self.index(n) as view:
                    if checkpoint_id is None:
                        entries = view.newest(below, page)
                    else:
                        found = view.find(checkpoint_id)
                        wanted = below is None or checkpoint_id < below
                        entries = [found] if found is not None and wanted else []
            except (FileNotFoundError, NotADirectoryError):
                return
            except CorruptCheckpointError as error:
                if not (self.lenient and checkpoint_id is None and not n.index.exists()):
                    raise
                log.warning("%s; skipped (on_corrupt='fallback')", error)
                return
            if seen is not None:
                if len(seen) > 1024:
                    seen.clear()  # a newest-first walk only needs the lines near it
                seen.update((entry.checkpoint_id, entry) for entry in entries)
            yield from (entry for entry in entries if not entry.deleted)
            if checkpoint_id is not None or len(entries) < page:
                return
            below, page = entries[-1].checkpoint_id, min(page * 4, 256)

    def has_checkpoints(self, thread_id: str) -> bool:
        """Whether any namespace of ``thread_id`` has a checkpoint line, intact, damaged or
        lost (even when reading leniently: a damaged checkpoint must not be replaced)."""
        for n in self.namespaces(thread_id):
            try:
                with IndexView(n.index, lambda _: None, heads=self.heads) as view:
                    if view.valid_end > view.data_start or view.lost is not None:
                        return True
            except (FileNotFoundError, NotADirectoryError):
                if self._lost(n):
                    return True
            except DamagedIndex:  # not even a header: damage, which counts as taken
                return True
        return False

    @staticmethod
    def _lost(n: Namespace) -> bool:
        """Whether ``n``'s missing ``checkpoints`` log had lines (or its manifest, which
        would tell, is damaged)."""
        try:
            return n.missing(CHECKPOINTS) is not None
        except DamagedIndex:
            return True

    # -- writing (the caller holds the thread's lock) -----------------------------------

    def ensure(self, n: Namespace) -> None:
        """Create ``n``'s folders and empty logs (each after its head) if missing,
        durably: ``writes`` before ``checkpoints``, so a namespace with the latter has
        both; then list it in the thread's manifest.

        Raises:
            CorruptCheckpointError: the logs are missing but lines were committed to them
                (nothing is created over lost lines).
        """
        if n.index.exists():
            return
        with reporting(n):
            for kind in (CHECKPOINTS, WRITES):
                if (lost := n.missing(kind)) is not None and not (n.dir / kind).exists():
                    raise lost.damage
        try:
            created = []
            for folder in (n.dir.parent, n.dir, *(n.dir / sub for sub in SUBDIRS)):
                with contextlib.suppress(FileExistsError):
                    folder.mkdir()
                    created.append(folder)
            self.sync(*(folder.parent for folder in created))
            if not n.writes_log.exists():
                _log.create(n.writes_log, WRITES, n.thread_id, n.ns, durable=self.durable)
            _log.create(n.index, CHECKPOINTS, n.thread_id, n.ns, durable=self.durable)
            self.sync(n.dir)
        except OSError as exc:
            raise storage_error(exc, "create the namespace folder", n.dir) from exc
        self.list_namespace(n)

    def list_namespace(self, n: Namespace) -> None:
        """Make sure the thread's manifest lists ``n`` (after its logs exist)."""
        thread_dir = n.dir.parent
        with reporting(n):
            names = listed(thread_dir, n.thread_id)
        if n.ns not in names:
            try:
                write_manifest(thread_dir, n.thread_id, names | {n.ns}, durable=self.durable)
            except OSError as exc:
                raise storage_error(exc, "update the manifest of", thread_dir) from exc

    def commit(self, n: Namespace, view: IndexView, entry: Entry) -> None:
        """Make ``entry``'s checkpoint exist in the file ``view`` (writable) is open on;
        the value files it needs must be durable. Replacing a checkpoint keeps the values
        other checkpoints use (see _retire)."""
        if view.last is None and view.valid_end == view.data_start:
            self.list_namespace(n)  # its first line: listed, even if creating it was cut short
        old = None if _log.appends(view, entry.checkpoint_id) else view.find(entry.checkpoint_id)
        if old is not None and old.raw == entry.raw:
            return
        try:
            _log.commit(
                view,
                entry,
                n.thread_id,
                n.ns,
                durable=self.durable,
                others=None if old is None else (lambda entries: replace(n, old, entries)),
            )
        except OSError as exc:
            raise storage_error(exc, "update", n.index) from exc

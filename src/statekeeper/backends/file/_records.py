"""The directory of a file checkpointer, and the operations that span namespaces.

::

    <root>/statekeeper.json                   {"format": "statekeeper-file", "version": 2}
    <root>/threads/<thread>/<namespace>/      one folder per (thread, namespace); names
        checkpoints                           from _file_layout.file_name; the files in
        writes                                it are described in _file_namespace
        values/<channel>@<version>
    <root>/locks/<thread>                     flock targets: the thread's checkpoints,
    <root>/locks/<thread>@writes              and its pending writes
    <root>/quarantine/                        damaged files moved aside by verify()
    <root>/trash/                             threads being deleted or copied
    <root>/claims/                            run claims (claim_thread), by hashed thread id

Value files are written through a temporary file and a rename and never modified in
place, so a copied thread shares them through hard links; the ``checkpoints`` and
``writes`` logs are only appended to or replaced, and a copy gets its own.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from statekeeper._storage.files import (
    TEMP_PREFIX,
    KeyLocks,
    read_bytes,
    replace_file,
    storage_error,
)
from statekeeper._storage.files import sync_dir as _sync_dir
from statekeeper.backends.file import _index as _file_index
from statekeeper.backends.file._index import (
    CHECKPOINTS,
    WRITES,
    DamagedIndex,
    Entry,
    IndexView,
)
from statekeeper.backends.file._layout import (
    decode_name,
    file_name,
    is_hashed,
)
from statekeeper.backends.file._namespace import (
    SUBDIRS,
    Namespace,
    corrupt_error,
    names_in,
    reporting,
)
from statekeeper.backends.file._retire import replace
from statekeeper.errors import (
    ConfigurationError,
    CorruptCheckpointError,
    Damage,
    SchemaVersionError,
)

__all__ = [
    "CLAIMS_DIR",
    "FORMAT_FILE",
    "WRITES_LOCK",
    "Store",
    "thread_locks",
    "trash_lock",
    "trash_name",
]

FORMAT_FILE = "statekeeper.json"
# Beside threads/, never inside it: no thread, namespace or lock name can be this folder.
CLAIMS_DIR = "claims"
# The suffix of a thread's second lock: "@" never occurs in a file_name, so it names no thread.
WRITES_LOCK = "@writes"
_FORMAT = {"format": "statekeeper-file", "version": 2}
log = logging.getLogger("statekeeper.backends.file.checkpointer")


def thread_locks(name: str) -> tuple[str, str]:
    """Both lock names of the thread folder ``name``, in the order they are taken."""
    return name, name + WRITES_LOCK


def trash_name(kind: str, lock: str) -> str:
    """A fresh ``trash/`` folder name for a copy (``kind`` ``"copy"`` or ``"replaced"``)
    made under the lock named ``lock``: ``<kind>-<16 hex digits>-<lock>``. verify() removes
    such a leftover of a crash while it holds that lock, so never one still in use."""
    return f"{kind}-{os.urandom(8).hex()}-{lock}"


def trash_lock(name: str) -> str | None:
    """The lock under which the ``trash/`` folder ``name`` (from :func:`trash_name`) was
    made; None if it is not such a folder."""
    kind, _, rest = name.partition("-")
    random, _, lock = rest.partition("-")
    ours = kind in ("copy", "replaced") and len(random) == 16 and lock[:1] not in ("", ".")
    return lock if ours else None


class Store:
    """The directory of one file checkpointer (see the module docstring).

    ``lenient`` (``on_corrupt="fallback"``) logs and skips damaged checkpoint lines
    instead of raising; ``durable`` (``fsync=True``) flushes every write to disk.
    """

    def __init__(self, root: Path, lock_timeout: float, *, lenient: bool, durable: bool):
        self.root = root
        self.lenient = lenient
        self.durable = durable
        self.threads = root / "threads"
        self.quarantine = root / "quarantine"
        self.trash = root / "trash"
        self.locks = KeyLocks(root / "locks", lock_timeout)  # fails first where no flock
        try:
            self._initialise()
        except OSError as exc:
            raise storage_error(exc, "set up the checkpoint directory", root) from exc

    def _initialise(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        marker = self.root / FORMAT_FILE
        try:
            found = json.loads(read_bytes(marker))
        except FileNotFoundError:
            strays = [p for p in self.root.iterdir() if not p.name.startswith(TEMP_PREFIX)]
            if strays:
                raise ConfigurationError(
                    f"{str(self.root)!r} is not empty and holds no {FORMAT_FILE}, so it is "
                    "not a statekeeper file store; choose a new or empty directory"
                ) from None
            replace_file(marker, json.dumps(_FORMAT).encode() + b"\n")
            _sync_dir(self.root)
            found = _FORMAT
        except ValueError:
            found = {}
        if not isinstance(found, dict) or found.get("format") != _FORMAT["format"]:
            raise ConfigurationError(f"{str(marker)!r} is not a statekeeper format marker")
        if not isinstance(found.get("version"), int) or found["version"] > _FORMAT["version"]:
            raise SchemaVersionError(
                f"{str(self.root)!r} uses file format version {found.get('version')!r}, "
                f"newer than this statekeeper understands ({_FORMAT['version']}); upgrade it"
            )
        if found["version"] < _FORMAT["version"]:
            raise SchemaVersionError(
                f"{str(self.root)!r} uses file format version {found['version']}, which this "
                f"statekeeper no longer reads (it writes version {_FORMAT['version']}); to "
                "keep its threads, open it with the statekeeper that wrote it and put every "
                "checkpoint (with its writes) into a new directory, or start a new directory"
            )
        created = False
        for sub in (self.threads, self.root / "locks", self.quarantine, self.trash):
            with contextlib.suppress(FileExistsError):
                sub.mkdir()
                created = True
        if created:  # else a power loss could lose threads/ with everything put in it
            _sync_dir(self.root)

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
        folder = self.thread_dir(thread_id) / file_name(ns)
        return Namespace(thread_id, ns, folder, self.durable)

    def thread_ids(self) -> list[str]:
        """Every thread that has a namespace folder with a ``checkpoints`` file."""
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
        """The namespaces of ``thread_id`` that have a ``checkpoints`` file."""
        thread_dir = self.thread_dir(thread_id)
        found = []
        for name in names_in(thread_dir):
            if is_hashed(name) or is_hashed(thread_dir.name):
                header = self._header(thread_dir / name / "checkpoints")
                if header is None:
                    continue
                n = Namespace(thread_id, header["checkpoint_ns"], thread_dir / name, self.durable)
                if header["thread_id"] != thread_id or file_name(n.ns) != name:
                    raise corrupt_error(n, None, n.index, "its header names another thread")
                found.append(n)
                continue
            try:
                n = Namespace(thread_id, decode_name(name), thread_dir / name, self.durable)
            except ValueError:
                continue  # not ours (a stray file a user or tool left)
            if n.index.exists():
                found.append(n)
        return found

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
    def index(self, n: Namespace, *, writable: bool = False) -> Iterator[IndexView]:
        """``n``'s ``checkpoints`` file (``FileNotFoundError`` if there is none). A damaged
        line raises CorruptCheckpointError or, when lenient, is logged and skipped (even
        on a writable view: a writer goes on from the intact lines)."""
        on_damage: Callable[[DamagedIndex], None] | None = None
        if self.lenient:

            def on_damage(damage: DamagedIndex) -> None:
                log.warning("skipping a damaged line of %s: %s", n.index, damage)

        try:
            with IndexView(n.index, on_damage, writable=writable) as view:
                if is_hashed(n.dir.name) or is_hashed(n.dir.parent.name):
                    # a shortened name is not reversible: only the header says whose it is
                    header = view.header()
                    if (header.get("thread_id"), header.get("checkpoint_ns")) != (
                        n.thread_id,
                        n.ns,
                    ):
                        raise DamagedIndex("its header names another thread or namespace")
                yield view
        except DamagedIndex as damage:
            raise corrupt_error(n, None, n.index, str(damage)) from None

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
        them is yielded: the older lines holding values of the newer ones often are there."""
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
            if seen is not None:
                if len(seen) > 1024:
                    seen.clear()  # a newest-first walk only needs the lines near it
                seen.update((entry.checkpoint_id, entry) for entry in entries)
            yield from (entry for entry in entries if not entry.deleted)
            if checkpoint_id is not None or len(entries) < page:
                return
            below, page = entries[-1].checkpoint_id, min(page * 4, 256)

    def has_checkpoints(self, thread_id: str) -> bool:
        """Whether any namespace of ``thread_id`` has a checkpoint line, intact or damaged
        (even when reading leniently: a damaged checkpoint must not be replaced)."""
        for n in self.namespaces(thread_id):
            try:
                with IndexView(n.index, on_damage=lambda _: None) as view:
                    if view.valid_end > view.data_start:
                        return True
            except (FileNotFoundError, NotADirectoryError):
                continue
            except DamagedIndex:  # not even a header: damage, which counts as taken
                return True
        return False

    # -- writing (the caller holds the thread's lock) -----------------------------------

    def ensure(self, n: Namespace) -> None:
        """Create ``n``'s folders and empty logs if missing, durably: ``writes`` before
        ``checkpoints``, so a namespace with the latter has both."""
        if n.index.exists():
            return
        try:
            created = []
            for folder in (n.dir.parent, n.dir, *(n.dir / sub for sub in SUBDIRS)):
                with contextlib.suppress(FileExistsError):
                    folder.mkdir()
                    created.append(folder)
            self.sync(*(folder.parent for folder in created))
            if not n.writes_log.exists():
                _file_index.create(n.writes_log, WRITES, n.thread_id, n.ns, durable=self.durable)
            _file_index.create(n.index, CHECKPOINTS, n.thread_id, n.ns, durable=self.durable)
            self.sync(n.dir)
        except OSError as exc:
            raise storage_error(exc, "create the namespace folder", n.dir) from exc

    def commit(self, n: Namespace, view: IndexView, entry: Entry) -> None:
        """Make ``entry``'s checkpoint exist in the file ``view`` (writable) is open on;
        the value files it needs must be durable. Replacing a checkpoint keeps the values
        other checkpoints use (see _file_retire)."""
        old = (
            None
            if _file_index.appends(view, entry.checkpoint_id)
            else view.find(entry.checkpoint_id)
        )
        if old is not None and old.raw == entry.raw:
            return
        try:
            _file_index.commit(
                view,
                entry,
                n.thread_id,
                n.ns,
                durable=self.durable,
                others=None if old is None else (lambda entries: replace(n, old, entries)),
            )
        except OSError as exc:
            raise storage_error(exc, "update", n.index) from exc

    # -- whole threads -----------------------------------------------------------------

    def remove_thread(self, thread_id: str) -> None:
        """Delete a thread's folder: one rename makes it vanish for readers at once."""
        doomed = self.trash / f"deleted-{os.urandom(8).hex()}"
        try:
            self.thread_dir(thread_id).rename(doomed)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise storage_error(exc, "delete", self.thread_dir(thread_id)) from exc
        self.sync(self.threads)
        shutil.rmtree(doomed, ignore_errors=True)

    def copy_thread(self, source: str, target: str) -> None:
        """Copy every namespace of ``source`` to ``target`` (which has no checkpoints),
        built aside and published with one rename. Value files are hard links
        when the file system allows (they are never modified in place). The caller holds
        the target's lock, which the folders in ``trash/`` name (see :func:`trash_name`)."""
        if not self.thread_dir(source).is_dir():
            return
        staging = self.trash / trash_name("copy", file_name(target))
        try:
            staging.mkdir()
            existing = self.thread_dir(target)
            for n in self.namespaces(source):
                with reporting(n):
                    entries = n.entries()
                    writes = n.write_entries()
                copy = staging / n.dir.name
                copy.mkdir()
                for sub in SUBDIRS:
                    (copy / sub).mkdir()
                    for name in names_in(n.dir / sub):
                        self._link(n.dir / sub / name, copy / sub / name)
                    self.sync(copy / sub)
                # the target's pending writes (of no checkpoint yet) are kept, after these
                theirs = Namespace(target, n.ns, existing / n.dir.name, self.durable)
                with reporting(theirs):
                    writes += theirs.write_entries()
                for path, kind, lines in (
                    (WRITES, WRITES, writes),
                    (CHECKPOINTS, CHECKPOINTS, entries),
                ):
                    _file_index.rewrite(
                        copy / path, kind, target, n.ns, lines, durable=self.durable
                    )
            for folder, _, names in os.walk(existing):  # the target's other namespaces
                for name in names:
                    relative = (Path(folder) / name).relative_to(existing)
                    if not name.startswith(".") and not (staging / relative).exists():
                        (staging / relative).parent.mkdir(parents=True, exist_ok=True)
                        self._link(existing / relative, staging / relative)
            self.sync(staging)
            old = self.trash / trash_name("replaced", file_name(target))
            with contextlib.suppress(FileNotFoundError):
                existing.rename(old)
            try:
                staging.rename(existing)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    old.rename(existing)  # put the target's pending writes back
                raise
            self.sync(self.threads)
            shutil.rmtree(old, ignore_errors=True)
        except BaseException as exc:
            shutil.rmtree(staging, ignore_errors=True)
            if isinstance(exc, OSError):
                raise storage_error(exc, "copy", self.thread_dir(source)) from exc
            raise

    def _link(self, source: Path, target: Path) -> None:
        try:
            os.link(source, target)
        except OSError:  # no hard links here (another device, FAT, some network mounts)
            replace_file(target, read_bytes(source), durable=self.durable)

"""The directory of a file checkpointer as a whole: opening it (its format marker,
read-only mode, the upgrade of a directory written in an older format), the names of its
locks, and the operations on a whole thread folder, which go through ``trash/``: deleting
one (one rename there makes it vanish) and copying one (built there under a name
:func:`trash_name` gives, published with one rename).

``statekeeper.json`` names the format and its version. Version 3 added a head beside each
log and a manifest in each thread folder (see :mod:`._log`); its lines chain to the line
before. Version 4 (this one) adds the index (``index/``, :mod:`._log.catalog`), which
every write keeps: a statekeeper that does not know it would write without keeping it, so
it must refuse the directory (the marker tells it to). A directory in format 3 or 2 opened
read-write is upgraded in place, without rewriting a line: a format 2 one first gets,
thread by thread under its locks, a head for each log as the log is (every complete line
counts as committed) and a manifest of its namespaces; then the marker says 4, and the
checkpointer builds the index (one read of every log) before it is used. Old lines stay
as they are, new lines chain to them. Opened read-only, a directory in format 2 or 3 is
read as it is (lines and files checked by their own checksums; without heads, a log cut
at a line boundary cannot be told from a shorter history; without an index, listings read
every thread).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from statekeeper._storage.files import (
    TEMP_PREFIX,
    KeyLocks,
    read_bytes,
    replace_file,
    storage_error,
    sync_dir,
)
from statekeeper.backends.file._layout import decode_name, file_name, is_hashed
from statekeeper.backends.file._log.head import head_path, initial_head
from statekeeper.backends.file._log.lines import CHECKPOINTS, WRITES, DamagedIndex
from statekeeper.backends.file._log.manifest import MANIFEST, listed, write_manifest
from statekeeper.backends.file._log.view import IndexView
from statekeeper.backends.file._log.write import head_for, rewrite
from statekeeper.backends.file._namespace import SUBDIRS, Namespace, names_in, reporting
from statekeeper.errors import ConfigurationError, SchemaVersionError, StorageNotFoundError

if TYPE_CHECKING:
    from statekeeper.backends.file._records import Store

__all__ = [
    "FORMAT_FILE",
    "HEADS",
    "VERSION",
    "WRITES_LOCK",
    "Opened",
    "copy_thread",
    "open_directory",
    "remove_thread",
    "thread_locks",
    "trash_lock",
    "trash_name",
]

FORMAT_FILE = "statekeeper.json"
VERSION = 4
HEADS = 3  # the first version whose logs have heads
_OLDEST = 2  # the oldest format read (and upgraded)
_NAME = "statekeeper-file"
_SUBDIRS = ("threads", "locks", "quarantine", "trash")
# The suffix of a thread's second lock: "@" never occurs in a file_name, so it names no thread.
WRITES_LOCK = "@writes"


class Opened(NamedTuple):
    """What opening found: the format ``version`` now in force, and whether the
    directory is open ``read_only`` (asked for, or not writable)."""

    version: int
    read_only: bool


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


def writable(root: Path) -> bool:
    """Whether ``root`` (an existing directory) can be written: not on a read-only mount,
    and ours to write."""
    read_only_mount = bool(os.statvfs(root).f_flag & os.ST_RDONLY)
    return not read_only_mount and os.access(root, os.W_OK)


def open_directory(root: Path, *, read_only: bool, durable: bool, locks: KeyLocks) -> Opened:
    """Open ``root`` as a checkpoint directory: read-only when asked or when it is not
    writable (nothing is created or changed then); otherwise created if missing and
    upgraded to :data:`VERSION` if older.

    Raises:
        StorageNotFoundError: opened read-only, and there is no checkpoint directory.
        ConfigurationError: it exists and is a file, or is not empty and is not a
            checkpoint directory.
        SchemaVersionError: it was written by a newer statekeeper, or in format 1.
        OSError: it cannot be read or created.
    """
    if root.exists() and not root.is_dir():  # else: "File exists", or "no database"
        raise ConfigurationError(
            f"{str(root)!r} is a file, not a directory: the file backend keeps its threads "
            "in a directory; name a new or empty directory, or a checkpoint directory"
        )
    if not read_only and root.is_dir() and not writable(root):
        read_only = True
    if read_only:
        version = _read_marker(root)
        if version is None:
            raise StorageNotFoundError(
                f"{str(root)!r} holds no statekeeper checkpoint directory (opened "
                "read-only, so none was created); check the path"
            )
        return Opened(version, True)
    root.mkdir(parents=True, exist_ok=True)
    version = _read_marker(root)
    if version is None:
        _write_marker(root, durable=True)
        version = VERSION
    created = False
    for sub in _SUBDIRS:
        with contextlib.suppress(FileExistsError):
            (root / sub).mkdir()
            created = True
    if created:  # else a power loss could lose threads/ with everything put in it
        sync_dir(root)
    if version < HEADS:
        _upgrade(root, locks, durable=durable)
    if version < VERSION:
        _write_marker(root, durable=durable)  # the checkpointer builds the index next
    return Opened(VERSION, False)


def _read_marker(root: Path) -> int | None:
    """The version the marker of ``root`` names; None if ``root`` is missing or empty."""
    marker = root / FORMAT_FILE
    try:
        found = json.loads(read_bytes(marker))
    except (FileNotFoundError, NotADirectoryError):
        try:
            strays = [p for p in root.iterdir() if not p.name.startswith(TEMP_PREFIX)]
        except (FileNotFoundError, NotADirectoryError):
            return None
        if strays:
            raise ConfigurationError(
                f"{str(root)!r} is not empty and holds no {FORMAT_FILE}, so it is "
                "not a statekeeper file store; choose a new or empty directory"
            ) from None
        return None
    except (ValueError, IsADirectoryError):
        found = {}
    if not isinstance(found, dict) or found.get("format") != _NAME:
        raise ConfigurationError(f"{str(marker)!r} is not a statekeeper format marker")
    version = found.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise SchemaVersionError(
            f"{str(root)!r} uses file format version {version!r}, newer than this "
            f"statekeeper understands ({VERSION}); upgrade it"
        )
    if version < _OLDEST:
        raise SchemaVersionError(
            f"{str(root)!r} uses file format version {version}, which this statekeeper "
            f"no longer reads (it writes version {VERSION}); to keep its threads, open it "
            "with the statekeeper that wrote it and put every checkpoint (with its "
            "writes) into a new directory, or start a new directory"
        )
    return version


def _write_marker(root: Path, *, durable: bool) -> None:
    marker = json.dumps({"format": _NAME, "version": VERSION}).encode() + b"\n"
    replace_file(root / FORMAT_FILE, marker, durable=durable)
    sync_dir(root)


def _upgrade(root: Path, locks: KeyLocks, *, durable: bool) -> None:
    """Give every log of a format 2 directory its head and every thread its manifest,
    thread by thread under its locks."""
    threads = root / "threads"
    for name in names_in(threads):
        if (threads / name).is_dir():
            with locks.hold(*thread_locks(name)):
                _upgrade_thread(threads / name, durable=durable)


def _upgrade_thread(thread_dir: Path, *, durable: bool) -> None:
    thread_id = None if is_hashed(thread_dir.name) else _decoded(thread_dir.name)
    namespaces: set[str] = set()
    for ns_name in names_in(thread_dir):
        ns_dir = thread_dir / ns_name
        if not ns_dir.is_dir():
            continue
        for kind in (WRITES, CHECKPOINTS):
            try:
                with IndexView(ns_dir / kind, lambda _: None, kind=kind) as view:
                    head = head_for(view)
                    header = view.header()
            except (FileNotFoundError, NotADirectoryError, DamagedIndex):
                continue  # no log, or no intact header: verify() reports what is wrong
            initial_head(head_path(ns_dir / kind), head, durable=durable)
            if kind == CHECKPOINTS and thread_id in (None, header.get("thread_id")):
                thread_id = header.get("thread_id")
                if isinstance(header.get("checkpoint_ns"), str):
                    namespaces.add(header["checkpoint_ns"])
        if durable:
            sync_dir(ns_dir)
    if namespaces and isinstance(thread_id, str):
        write_manifest(thread_dir, thread_id, namespaces, durable=durable)


def _decoded(name: str) -> str | None:
    try:
        return decode_name(name)
    except ValueError:
        return None


# -- whole threads (the caller holds their locks) -------------------------------------


def remove_thread(store: Store, thread_id: str) -> None:
    """Delete a thread's folder: one rename makes it vanish for readers at once."""
    doomed = store.trash / f"deleted-{os.urandom(8).hex()}"
    try:
        store.thread_dir(thread_id).rename(doomed)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise storage_error(exc, "delete", store.thread_dir(thread_id)) from exc
    store.sync(store.threads)
    shutil.rmtree(doomed, ignore_errors=True)


def copy_thread(store: Store, source: str, target: str) -> None:
    """Copy every namespace of ``source`` to ``target`` (which has no checkpoints),
    built aside and published with one rename. Value files are hard links
    when the file system allows (they are never modified in place). The caller holds
    the target's lock, which the folders in ``trash/`` name (see :func:`trash_name`)."""
    if not store.thread_dir(source).is_dir():
        return
    staging = store.trash / trash_name("copy", file_name(target))
    copied: set[str] = set()
    try:
        staging.mkdir()
        existing = store.thread_dir(target)
        for n in store.namespaces(source):
            with reporting(n):
                entries = n.entries()
                writes = n.write_entries()
            copy = staging / n.dir.name
            copy.mkdir()
            for sub in SUBDIRS:
                (copy / sub).mkdir()
                for name in names_in(n.dir / sub):
                    _link(store, n.dir / sub / name, copy / sub / name)
                store.sync(copy / sub)
            # the target's pending writes (of no checkpoint yet) are kept, after these
            theirs = Namespace(target, n.ns, existing / n.dir.name, store.durable, store.heads)
            with reporting(theirs):
                writes += theirs.write_entries()
            for path, kind, lines in (
                (WRITES, WRITES, writes),
                (CHECKPOINTS, CHECKPOINTS, entries),
            ):
                rewrite(copy / path, kind, target, n.ns, lines, durable=store.durable)
            copied.add(n.ns)
        copied |= _link_others(store, existing, staging, target)
        write_manifest(staging, target, copied, durable=store.durable)
        old = store.trash / trash_name("replaced", file_name(target))
        with contextlib.suppress(FileNotFoundError):
            existing.rename(old)
        try:
            staging.rename(existing)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                old.rename(existing)  # put the target's pending writes back
            raise
        store.sync(store.threads)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(exc, OSError):
            raise storage_error(exc, "copy", store.thread_dir(source)) from exc
        raise


def _link_others(store: Store, existing: Path, staging: Path, target: str) -> set[str]:
    """Link the files of the target's other namespaces (those the copy does not
    replace) into ``staging``; return the namespaces the target's manifest lists."""
    names: set[str] = set()
    for folder, _, files in os.walk(existing):
        for name in files:
            relative = (Path(folder) / name).relative_to(existing)
            if relative == Path(MANIFEST):
                names |= listed(existing, target)
            elif not name.startswith(".") and not (staging / relative).exists():
                (staging / relative).parent.mkdir(parents=True, exist_ok=True)
                _link(store, existing / relative, staging / relative)
    return names


def _link(store: Store, source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # no hard links here (another device, FAT, some network mounts)
        replace_file(target, read_bytes(source), durable=store.durable)

"""``FileStore``: a memory store in plain files, one per item, standard library only.

::

    <root>/statekeeper-memory.json        {"format": "statekeeper-memory-files", "version": 1}
    <root>/namespaces/<label>/<label>/    a folder per namespace, a level per label
        <key>.json                        one item: a checksummed record (_files.pack_record)
    <root>/locks/<namespace>              flock targets: one per namespace written

Folder and file names are :func:`~statekeeper.backends.file._layout.file_name` of the
label or key: safe and reversible for any text, shortened with a hash when long (which is
why every item file also holds its namespace and key, and readers check them). A label
never contains ``.``, so a folder name never does, while an item file's name ends in
``.json``: the two never meet. An item file reads with ``cat``: a header line (format,
SHA-256 and length of the rest), a line of JSON (namespace, key, timestamps, TTL, terms,
embeddings in base64), then the value as JSON.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Self, Unpack

from langgraph.store.base import IndexConfig, Result, TTLConfig

from statekeeper._storage.files import (
    KeyLocks,
    RecordError,
    pack_record,
    read_bytes,
    replace_file,
    storage_error,
    sync_dir,
    unpack_record,
)
from statekeeper.backends.file import DirectoryOptions, directory_path, opening
from statekeeper.backends.file._directory import writable
from statekeeper.backends.file._layout import file_name
from statekeeper.errors import (
    ConfigurationError,
    ReadOnlyError,
    SchemaVersionError,
    StorageError,
    StorageNotFoundError,
)
from statekeeper.memory.store.base import Plan, Write
from statekeeper.memory.store.items import ItemStore, Namespace, StoredItem
from statekeeper.urls import OptionKind, StorageURL, parse_options

__all__ = ["FileStore"]

FORMAT_FILE = "statekeeper-memory.json"
_FORMAT_NAME = "statekeeper-memory-files"
_VERSION = 1
_NAMESPACES = "namespaces"
_LOCKS = "locks"
_SUFFIX = ".json"
_OPTIONS: dict[str, OptionKind] = {
    "mode": str,
    "lock_timeout": float,
    "fsync": bool,
    "semantic_weight": float,
    "ttl": object,
    "index": object,
}
_MKDIR_ATTEMPTS = 3  # a concurrent delete may remove an empty parent folder meanwhile


class FileStore(ItemStore):
    """A LangGraph store keeping each item in a JSON file under ``path`` (POSIX only).

    Args:
        path: the directory; created if missing (``mode="rw"``). An existing non-empty
            directory must already be a memory file store (it holds
            ``statekeeper-memory.json``).
        index, ttl, semantic_weight: as for :class:`~statekeeper.memory.store.SqliteStore`.
        options: :class:`~statekeeper.backends.file.DirectoryOptions`: ``mode``
            ``"rw"`` (default) or ``"ro"`` — read only: nothing is created or changed
            (no directory, file or lock file), a put or delete raises
            :class:`ReadOnlyError`, reads do not restart TTL clocks, and a missing
            directory raises :class:`StorageNotFoundError`; a directory that is not
            writable (a read-only mount) is opened read-only whatever ``mode`` says
            (:attr:`read_only` tells). ``lock_timeout``: seconds a writer waits for a
            namespace's lock (held by another process, or another thread of this one).
            ``fsync``: flush every write to disk before it counts (the default);
            ``False`` keeps every write atomic, but a power loss may lose the last ones.

    Guarantees: a put or delete replaces or removes one file with a rename or unlink, so
    a reader — or a process killed at any instant — sees the old item or the new one,
    never a mix. Writers of a namespace queue on its ``flock``, in this process and
    others; readers take no lock. Every item file carries a SHA-256 of its content: a
    damaged one raises :class:`~statekeeper.errors.StorageError` naming it, and is never
    deleted or skipped. Search reads every item under the searched prefix: O(items).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        semantic_weight: float = 0.5,
        **options: Unpack[DirectoryOptions],
    ) -> None:
        super().__init__(index=index, ttl=ttl, semantic_weight=semantic_weight)
        opened = opening(options)
        self.root = Path(path).expanduser()
        self.fsync = opened.fsync
        self._items = self.root / _NAMESPACES
        self.read_only = opened.read_only or (self.root.is_dir() and not writable(self.root))
        try:
            if self.read_only:
                self._check_root()
            else:
                self._open_root()
        except OSError as exc:
            raise storage_error(exc, "open the memory store directory", self.root) from exc
        self._locks = KeyLocks(self.root / _LOCKS, opened.lock_timeout)

    @classmethod
    def from_url(cls, url: StorageURL, options: Mapping[str, Any]) -> Self:
        """Open the directory a ``file://`` URL names, with its query options (text) and
        keyword ``options`` (``index`` among them); keywords win."""
        merged = parse_options("file memory store", _OPTIONS, url.options, options)
        return cls(directory_path(url), **merged)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.root)!r})"

    def _check_root(self) -> None:
        """Open read-only: the directory must be a memory store already."""
        if not (self.root / FORMAT_FILE).exists():
            if self.root.is_dir() and any(self.root.iterdir()):
                raise ConfigurationError(
                    f"{str(self.root)!r} is not empty and is not a statekeeper memory store "
                    f"(it has no {FORMAT_FILE})"
                )
            raise StorageNotFoundError(
                f"{str(self.root)!r} holds no statekeeper memory store (opened read-only, "
                "so none was created); check the path"
            )
        self._check_marker()

    def _check_marker(self) -> None:
        marker = self.root / FORMAT_FILE
        try:
            found = json.loads(read_bytes(marker))
            version = found["version"] if found.get("format") == _FORMAT_NAME else None
        except (ValueError, TypeError, KeyError, AttributeError):
            version = None
        if not isinstance(version, int):
            raise StorageError(f"{str(marker)!r} is not a statekeeper memory store's")
        if version > _VERSION:
            raise SchemaVersionError(
                f"the memory store in {str(self.root)!r} has format version {version}, "
                f"newer than this statekeeper knows ({_VERSION}); upgrade"
            )

    def _open_root(self) -> None:
        marker = self.root / FORMAT_FILE
        self.root.mkdir(parents=True, exist_ok=True)
        if marker.exists():
            self._check_marker()
        elif any(self.root.iterdir()):
            raise ConfigurationError(
                f"{str(self.root)!r} is not empty and is not a statekeeper memory store "
                f"(it has no {FORMAT_FILE}); use an empty or new directory"
            )
        else:
            marker_text = json.dumps({"format": _FORMAT_NAME, "version": _VERSION})
            replace_file(marker, marker_text.encode(), durable=self.fsync)
        for folder in (self._items, self.root / _LOCKS):
            folder.mkdir(exist_ok=True)
        if self.fsync:
            sync_dir(self.root)

    # -- names -------------------------------------------------------------------------------

    def _folder(self, namespace: Namespace) -> Path:
        return self._items.joinpath(*(file_name(label) for label in namespace))

    def _path(self, namespace: Namespace, key: str) -> Path:
        return self._folder(namespace) / (file_name(key) + _SUFFIX)

    def _writing(self, namespaces: set[Namespace]) -> contextlib.AbstractContextManager[None]:
        return self._locks.hold(*(file_name(".".join(ns)) for ns in namespaces))

    # -- read-only ---------------------------------------------------------------------------

    def _refuse(self, operation: str) -> None:
        if self.read_only:
            raise ReadOnlyError(
                f"cannot {operation}: {self!r} is open read-only (mode=ro, or the storage "
                "is not writable); open it read-write on writable storage to change it"
            )

    def _run(self, plan: Plan, now: float) -> list[Result]:
        if plan.writes:
            self._refuse("put or delete memory items")  # before anything is touched
        return super()._run(plan, now)

    # -- items -------------------------------------------------------------------------------

    def _put(self, write: Write, now: float) -> None:
        path = self._path(write.namespace, write.key)
        previous = self._read(path)
        try:
            if write.value is None:
                if previous is not None:
                    self._remove(path)
                return
            data = _encode(StoredItem.made(write, previous, now))
            self._replace(path, data)
        except OSError as exc:
            raise storage_error(exc, "write the memory item", path) from exc

    def _load(self, namespace: Namespace, key: str) -> StoredItem | None:
        return self._read(self._path(namespace, key))

    def _scan(self, prefix: Namespace, now: float) -> Iterator[StoredItem]:
        for _, files in self._walk(self._folder(prefix)):
            for path in files:
                item = self._read(path)
                if item is not None:
                    yield item

    def _namespaces(self, prefix: Namespace, now: float) -> Iterator[Namespace]:
        for _, files in self._walk(self._folder(prefix)):
            for path in files:
                item = self._read(path)
                if item is not None and item.live(now):
                    yield item.namespace
                    break  # one live item is enough

    def _refresh(self, items: Sequence[StoredItem], now: float) -> None:
        if self.read_only:
            return  # a read-only reader cannot restart TTL clocks; the read still works
        with self._writing({item.namespace for item in items}):
            for item in items:
                path = self._path(item.namespace, item.key)
                current = self._read(path)
                # only the version that was read, and only while it lives
                if current is None or current.updated_at != item.updated_at:
                    continue
                if current.ttl is None or not current.live(now):
                    continue
                renewed = replace(current, expires_at=now + current.ttl * 60.0)
                try:
                    self._replace(path, _encode(renewed))
                except OSError as exc:
                    raise storage_error(exc, "write the memory item", path) from exc

    def _sweep(self, now: float) -> int:
        if self._closed:
            raise StorageError(f"{self!r} is closed; open a new store")
        self._refuse("delete expired memory items")
        removed = 0
        for _, files in list(self._walk(self._items)):
            expired = [
                (p, i) for p in files if (i := self._read(p)) is not None and not i.live(now)
            ]
            if not expired:
                continue
            with self._writing({expired[0][1].namespace}):
                for path, _ in expired:
                    item = self._read(path)  # again, under the lock: it may be new now
                    if item is not None and not item.live(now):
                        try:
                            self._remove(path)
                        except OSError as exc:
                            raise storage_error(exc, "delete the memory item", path) from exc
                        removed += 1
        return removed

    # -- files -------------------------------------------------------------------------------

    def _read(self, path: Path) -> StoredItem | None:
        try:
            data = read_bytes(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise storage_error(exc, "read the memory item", path) from exc
        try:
            item = _decode(data)
        except (RecordError, ValueError, TypeError, KeyError) as exc:
            raise StorageError(
                f"the memory item file {str(path)!r} is damaged ({exc}); it was left in "
                "place: restore it from a backup, or move it away to drop the item"
            ) from None
        if self._path(item.namespace, item.key) != path:
            raise StorageError(
                f"the memory item file {str(path)!r} holds the item {item.key!r} of "
                f"namespace {item.namespace!r}, which belongs elsewhere; move it away"
            )
        return item

    def _replace(self, path: Path, data: bytes) -> None:
        for attempt in range(_MKDIR_ATTEMPTS):
            try:
                self._make_folders(path.parent)
                replace_file(path, data, durable=self.fsync)
                break
            except FileNotFoundError:
                if attempt == _MKDIR_ATTEMPTS - 1:
                    raise
        if self.fsync:
            sync_dir(path.parent)

    def _make_folders(self, folder: Path) -> None:
        missing = []
        while not folder.is_dir():
            missing.append(folder)
            folder = folder.parent
        for made in reversed(missing):
            with contextlib.suppress(FileExistsError):
                made.mkdir()
            if self.fsync:
                sync_dir(made.parent)

    def _remove(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        if self.fsync:
            sync_dir(path.parent)
        # An empty namespace leaves no folder (a writer of a child namespace that loses
        # its new parent folder to this makes it again: see _replace).
        with contextlib.suppress(OSError):
            path.parent.rmdir()

    def _walk(self, top: Path) -> Iterator[tuple[Path, list[Path]]]:
        """Each namespace folder under ``top`` (itself included) with its item files."""
        try:
            entries = list(os.scandir(top))
        except (FileNotFoundError, NotADirectoryError):
            return  # nothing stored there, or a namespace deleted meanwhile
        except OSError as exc:
            raise storage_error(exc, "list the memory store folder", top) from exc
        files = [
            Path(entry.path)
            for entry in entries
            if entry.name.endswith(_SUFFIX) and not entry.name.startswith(".")
        ]
        if files:
            yield top, files
        for entry in entries:
            if "." not in entry.name and entry.is_dir(follow_symlinks=False):
                yield from self._walk(Path(entry.path))


def _encode(item: StoredItem) -> bytes:
    meta = {
        "namespace": list(item.namespace),
        "key": item.key,
        "created_at": item.created_at,
        "updated_at": item.updated_at,
        "ttl": item.ttl,
        "expires_at": item.expires_at,
        "terms": list(item.terms),
        "vectors": [[path, base64.b64encode(blob).decode()] for path, blob in item.vectors],
    }
    return pack_record(meta, [item.value.encode("utf-8")]) + b"\n"


def _decode(data: bytes) -> StoredItem:
    # The newline after the value keeps `cat` tidy; it is outside the record.
    meta, blobs = unpack_record(data[:-1] if data.endswith(b"\n") else data)
    if len(blobs) != 1 or not isinstance(meta["namespace"], list):
        raise ValueError("not a memory item record")
    ttl, expires = meta["ttl"], meta["expires_at"]
    return StoredItem(
        namespace=tuple(str(label) for label in meta["namespace"]),
        key=str(meta["key"]),
        value=blobs[0].decode("utf-8"),
        created_at=str(meta["created_at"]),
        updated_at=str(meta["updated_at"]),
        ttl=None if ttl is None else float(ttl),
        expires_at=None if expires is None else float(expires),
        terms=tuple(str(term) for term in meta["terms"]),
        vectors=tuple((str(p), base64.b64decode(b, validate=True)) for p, b in meta["vectors"]),
    )

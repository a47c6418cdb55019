"""The manifest of a thread: ``threads/<thread>/@namespaces``, the namespaces it has.

A checksummed record (:func:`~statekeeper._storage.files.pack_record`) holding the full
thread id and the list of its namespaces, rewritten (atomically) when a namespace is
created, after that namespace's logs exist. A namespace it lists whose folder or logs
are gone lost committed checkpoints: that is damage, where without the manifest the
thread would simply seem to have one namespace less. (``@`` never occurs in a name made
by :func:`~statekeeper.backends.file._layout.file_name`, so no namespace folder can be
called this.) A thread folder deleted whole, manifest and all, is a deleted thread.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from statekeeper._storage.files import (
    RecordError,
    pack_record,
    read_bytes,
    replace_file,
    sync_dir,
    unpack_record,
)
from statekeeper.backends.file._log.lines import DamagedIndex

__all__ = ["MANIFEST", "Manifest", "listed", "read_manifest", "write_manifest"]

MANIFEST = "@namespaces"


class Manifest(NamedTuple):
    """What a manifest says: whose thread it is, and its namespaces."""

    thread_id: str
    namespaces: set[str]


def listed(thread_dir: Path, thread_id: str) -> set[str]:
    """The namespaces the manifest of ``thread_dir`` lists (none if it has no manifest).

    Raises:
        DamagedIndex: see :func:`read_manifest`.
    """
    found = read_manifest(thread_dir, thread_id)
    return set() if found is None else found.namespaces


def read_manifest(thread_dir: Path, thread_id: str | None) -> Manifest | None:
    """The manifest of ``thread_dir``; None if it has none.

    Raises:
        DamagedIndex: the manifest is damaged, or names another thread than
            ``thread_id`` (when given); record ``"index"``.
    """
    path = thread_dir / MANIFEST
    try:
        data = read_bytes(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        meta, _ = unpack_record(data)
        names = meta["namespaces"]
        if meta.get("kind") != "namespaces" or not isinstance(names, list):
            raise RecordError("not a manifest of namespaces")
        if not all(isinstance(ns, str) for ns in names):
            raise RecordError("a namespace is not text")
        owner = meta["thread_id"]
        if not isinstance(owner, str):
            raise RecordError("the thread id is not text")
    except (RecordError, KeyError, TypeError) as exc:
        raise DamagedIndex(f"{path}: {exc}", record="index") from None
    if thread_id is not None and owner != thread_id:
        raise DamagedIndex(f"{path}: it names another thread ({owner!r})", record="index")
    return Manifest(owner, set(names))


def write_manifest(
    thread_dir: Path, thread_id: str, namespaces: set[str], *, durable: bool
) -> None:
    """(Re)write the manifest of ``thread_dir`` listing ``namespaces``, durably."""
    meta = {"kind": "namespaces", "thread_id": thread_id, "namespaces": sorted(namespaces)}
    replace_file(thread_dir / MANIFEST, pack_record(meta), durable=durable)
    if durable:
        sync_dir(thread_dir)

"""Deleting checkpoints inside a namespace: ``delete_for_runs`` and ``prune(strategy=
"keep_latest")``, then collecting the value files nothing uses any more.

Rewriting the ``checkpoints`` file is the commit (a deleted checkpoint's line stays as a
deleted line while remaining checkpoints use values stored in it, see _file_retire); its
pending writes and unused value files are removed after it, so a crash in between leaves
unused lines and files, never a checkpoint without what it needs. The caller holds both
locks of the thread.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from statekeeper._storage.files import storage_error
from statekeeper._storage.lineage import keep_latest_ids
from statekeeper.backends.file._layout import value_file_name
from statekeeper.backends.file._log import write as _log
from statekeeper.backends.file._log.catalog import Change
from statekeeper.backends.file._log.lines import CHECKPOINTS, WRITES, Entry
from statekeeper.backends.file._namespace import (
    Damaged,
    Namespace,
    read_record,
    record_names,
    reporting,
)
from statekeeper.backends.file._records import Store
from statekeeper.backends.file._retire import files_of, retire
from statekeeper.backends.file._values import walk

__all__ = ["collect_values", "drop", "drop_runs", "keep_latest"]


def keep_latest(store: Store, n: Namespace, change: Change) -> None:
    """``prune(strategy="keep_latest")`` of one namespace (see _storage.lineage.keep_latest_ids)."""
    with reporting(n):
        entries = n.entries()
    live = [e for e in entries if not e.deleted]
    if not live:
        return
    newest = live[-1]
    with reporting(n, newest.checkpoint_id), store.index(n) as view:
        keep = keep_latest_ids(
            newest.checkpoint_id,
            newest.record["metadata"],
            lambda channels: walk(n, view, newest, channels)[0],
        )
    if doomed := {e.checkpoint_id for e in live} - keep:
        drop(store, n, entries, doomed, change)


def drop_runs(store: Store, n: Namespace, run_ids: set[str], change: Change) -> None:
    """``delete_for_runs`` in one namespace."""
    with reporting(n):
        entries = n.entries()
    if doomed := {e.checkpoint_id for e in entries if e.run_id in run_ids}:
        drop(store, n, entries, doomed, change)


def drop(
    store: Store, n: Namespace, entries: list[Entry], doomed: set[str], change: Change
) -> None:
    """Delete checkpoints of ``n`` with their writes, then the value files no
    remaining line uses. Rewriting the ``checkpoints`` file is the commit; the rest
    happens after it (a crash in between leaves unused writes lines and files, never a
    checkpoint without its values). The caller holds both locks of the thread. The index
    hears of it through ``change``: the thread's head is pending before (in the root
    namespace), the checkpoints deleted after."""
    kept = retire(entries, doomed)
    with reporting(n):
        writes = n.write_entries()
    if n.ns == "":
        change.pending()
    try:
        _log.rewrite(n.index, CHECKPOINTS, n.thread_id, n.ns, kept, durable=store.durable)
        if any(e.checkpoint_id in doomed for e in writes):
            left = [e for e in writes if e.checkpoint_id not in doomed]
            _log.rewrite(n.writes_log, WRITES, n.thread_id, n.ns, left, durable=store.durable)
    except OSError as exc:
        raise storage_error(exc, "delete checkpoints in", n.dir) from exc
    change.drop(n.ns, sorted(doomed))
    collect_values(store, n, files_of(kept))


def collect_values(store: Store, n: Namespace, used: set[str]) -> None:
    """Remove the files in ``values/`` not named in ``used`` (what a ``put`` killed
    before its commit left, too: no ``put`` runs while the caller holds the thread's
    locks) that are intact value records of their own name; damaged or unrecognised
    files are left alone, for verify() to report."""
    removed = False
    for name in record_names(n.values_dir):
        if name not in used and _intact_value(n.values_dir / name):
            with contextlib.suppress(FileNotFoundError):
                (n.values_dir / name).unlink()
                removed = True
    if removed:
        store.sync(n.values_dir)


def _intact_value(path: Path) -> bool:
    """Whether ``path`` holds an intact value record of its own file name: the only kind
    of file garbage collection deletes (damage is left for verify() to report)."""
    try:
        meta = read_record(path, "value")[0]
        return value_file_name(meta["channel"], meta["version"]) == path.name
    except (FileNotFoundError, Damaged, KeyError, TypeError, AttributeError):
        return False

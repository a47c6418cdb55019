"""``FileCheckpointer.verify()``: find damaged files and, if asked, move them aside.

Checked per namespace, under the thread's lock (so no writer is halfway through it):

* the ``checkpoints`` file: header, every line's checksum, ids strictly increasing;
* every record in ``values/`` and ``writes/``: checksum, length, kind, and that its own
  ids map back to its file name;
* every checkpoint: each value file it needs exists and is intact, and so is its writes
  file. A checkpoint that fails only because of another file is reported too (with the
  ``checkpoints`` file as its path), since it can no longer be loaded.

Quarantine moves each damaged file to ``quarantine/<timestamp>/<its path>``; when lines
of a ``checkpoints`` file are damaged or name checkpoints that cannot be loaded, the file
is copied there whole and rewritten without them. That leaves a store in which every
listed checkpoint loads. Nothing is deleted, except temporary files of interrupted
writes, which never held a committed checkpoint, and what interrupted deletes and copies
left in ``trash/``. Files in ``values/`` and ``writes/`` whose names cannot be ours are
ignored.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from statekeeper._files import TEMP_PREFIX, read_bytes, replace_file, sync_dir
from statekeeper.checkpointers import _file_index
from statekeeper.checkpointers._deltas import MAX_CHAIN
from statekeeper.checkpointers._file_index import DamagedIndex, Entry, IndexView
from statekeeper.checkpointers._file_layout import (
    decode_name,
    file_name,
    is_hashed,
    value_file_name,
)
from statekeeper.checkpointers._file_namespace import (
    SUBDIRS,
    Damaged,
    Namespace,
    names_in,
    read_record,
    record_names,
)
from statekeeper.checkpointers._file_store import Store, thread_locks, trash_lock

__all__ = ["CorruptFile", "verify"]


@dataclass(frozen=True)
class CorruptFile:
    """A damaged file found by ``verify()``: where, why, and what it belongs to (``None``
    where that cannot be told)."""

    path: Path
    reason: str
    thread_id: str | None = None
    checkpoint_ns: str | None = None
    checkpoint_id: str | None = None


def verify(store: Store, *, quarantine: bool) -> list[CorruptFile]:
    """See the module docstring. Thread by thread; returns every problem found."""
    _empty_trash(store)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ") + f"-{os.getpid()}"
    found: list[CorruptFile] = []
    for thread_name in names_in(store.threads):
        with store.locks.hold(*thread_locks(thread_name)):  # named after the folder
            for ns_name in names_in(store.threads / thread_name):
                ns_dir = store.threads / thread_name / ns_name
                n = _namespace(store, ns_dir)
                if isinstance(n, CorruptFile):
                    found.append(n)
                    if quarantine:
                        _move(store, ns_dir, stamp)
                elif n is not None:
                    found.extend(_verify_namespace(store, n, quarantine, stamp))
    return found


def _empty_trash(store: Store) -> None:
    """Remove what interrupted deletes and copies left in ``trash/``. A ``deleted-*``
    folder is garbage once renamed there; a copy's folders are used until the copy
    releases the target's lock, which their names give, so they are removed under it."""
    for name in os.listdir(store.trash):  # noqa: PTH208 - names, not Path objects
        if (lock := trash_lock(name)) is not None:
            with store.locks.hold(lock):
                shutil.rmtree(store.trash / name, ignore_errors=True)
        elif name.startswith("deleted-") or re.fullmatch(r"replaced-[0-9a-f]{16}", name):
            shutil.rmtree(store.trash / name, ignore_errors=True)  # (the latter: older)


def _namespace(store: Store, ns_dir: Path) -> Namespace | CorruptFile | None:
    """The namespace a folder holds; None for a stray folder that is not ours."""
    thread_name, ns_name = ns_dir.parent.name, ns_dir.name
    if not is_hashed(thread_name) and not is_hashed(ns_name):
        try:
            ids = decode_name(thread_name), decode_name(ns_name)
        except ValueError:
            return None
        return Namespace(*ids, ns_dir, store.durable)
    try:  # a shortened name: the full ids are only in the header
        with IndexView(ns_dir / "checkpoints") as view:
            header = view.header()
        ids = header["thread_id"], header["checkpoint_ns"]
        if (file_name(ids[0]), file_name(ids[1])) != (thread_name, ns_name):
            raise DamagedIndex("its header names another thread or namespace than its folder")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (DamagedIndex, KeyError, TypeError) as exc:
        reason = f"{exc}; the namespace's full ids were only stored there"
        return CorruptFile(ns_dir / "checkpoints", reason)
    return Namespace(*ids, ns_dir, store.durable)


def _verify_namespace(
    store: Store, n: Namespace, quarantine: bool, stamp: str
) -> list[CorruptFile]:
    for folder in (n.dir, *(n.dir / sub for sub in SUBDIRS)):
        for name in os.listdir(folder) if folder.is_dir() else ():  # noqa: PTH208
            if name.startswith(TEMP_PREFIX):
                (folder / name).unlink(missing_ok=True)

    def problem(path: Path, reason: str, checkpoint_id: str | None = None) -> CorruptFile:
        return CorruptFile(path, reason, n.thread_id, n.ns, checkpoint_id)

    entries, damage = _read_checkpoints(n)
    found = [problem(n.index, reason) for reason in damage]

    damaged: dict[str, set[str]] = {sub: set() for sub in SUBDIRS}
    bases: dict[str, str] = {}  # value file -> the value file its append delta builds on
    for sub, kind in (("values", "value"), ("writes", "writes")):
        for name in record_names(n.dir / sub, kind):  # other names are not ours
            path = n.dir / sub / name
            try:
                base = _check_record(path, kind)
            except FileNotFoundError:
                continue
            except Damaged as exc:
                damaged[sub].add(name)
                checkpoint_id = _decoded(name) if kind == "writes" else None
                found.append(problem(path, exc.reason, checkpoint_id))
                continue
            if base is not None:
                bases[name] = base

    doomed: set[str] = set()
    for entry in entries:
        needs = _needs(n, entry.record, damaged, bases)
        if n.writes_path(entry.checkpoint_id).name in damaged["writes"]:
            needs.append(f"its writes file {n.writes_path(entry.checkpoint_id).name} is damaged")
        if needs:
            reason = f"checkpoint {entry.checkpoint_id!r} cannot be loaded: " + "; ".join(needs)
            found.append(problem(n.index, reason, entry.checkpoint_id))
            doomed.add(entry.checkpoint_id)

    if quarantine and found:
        for item in found:
            if item.path != n.index:
                _move(store, item.path, stamp)
        for checkpoint_id in doomed:
            _move(store, n.writes_path(checkpoint_id), stamp)
        if damage or doomed:  # keep the whole file aside, then drop what cannot load
            target = _target(store, n.index, stamp)
            replace_file(target, read_bytes(n.index), durable=store.durable)
            if store.durable:  # the copy must outlive a power loss before the rewrite
                sync_dir(target.parent)
            kept = [e for e in entries if e.checkpoint_id not in doomed]
            _file_index.rewrite(n.index, n.thread_id, n.ns, kept, durable=store.durable)
    return found


def _read_checkpoints(n: Namespace) -> tuple[list[Entry], list[str]]:
    """The intact checkpoint lines (damaged ones skipped) and what is wrong, if anything."""
    damage: list[str] = []
    try:
        with IndexView(n.index, on_damage=lambda d: damage.append(str(d))) as view:
            entries = view.all()
            try:
                header = view.header()
            except DamagedIndex as exc:
                header = {}
                damage.append(str(exc))
    except FileNotFoundError:
        return [], []
    except DamagedIndex as exc:  # not even a header line: nothing in it can be read
        return [], [str(exc)]
    if header and (header.get("thread_id"), header.get("checkpoint_ns")) != (n.thread_id, n.ns):
        damage.append("its header names another thread or namespace")
    ids = [e.checkpoint_id for e in entries]
    if any(a >= b for a, b in itertools.pairwise(ids)):
        damage.append("its lines are not in checkpoint id order")
    return entries, damage


def _check_record(path: Path, kind: str) -> str | None:
    """Raise Damaged unless ``path`` holds an intact ``kind`` record of its own name;
    return the file name of the value an append delta builds on, if it is one."""
    meta = read_record(path, kind)[0]
    try:
        if kind == "value":
            expected = value_file_name(meta["channel"], meta["version"])
            base = meta.get("base")
            base_name = None if base is None else value_file_name(meta["channel"], base)
        else:
            expected, base_name = file_name(meta["checkpoint_id"]), None
    except (KeyError, TypeError, AttributeError) as exc:
        raise Damaged(path, f"malformed {kind} record ({exc!r})") from None
    if expected != path.name:
        raise Damaged(path, "its content belongs to another file name")
    return base_name


def _needs(
    n: Namespace, record: dict[str, Any], damaged: dict[str, set[str]], bases: dict[str, str]
) -> list[str]:
    """What a checkpoint needs that is damaged or missing: a value file, or a file down
    the chain of append deltas that value is built on."""
    needs = []
    for channel in record["values"]:
        name = current = value_file_name(channel, record["channel_versions"][channel])
        for _ in range(MAX_CHAIN + 2):
            via = "" if current == name else f" (through the delta chain of {name})"
            if current in damaged["values"]:
                needs.append(f"its value file {current} is damaged{via}")
            elif not (n.values_dir / current).exists():
                needs.append(f"its value file {current} is missing{via}")
            elif current in bases:
                current = bases[current]
                continue
            break
        else:
            needs.append(f"the delta chain of its value file {name} does not end")
    return needs


def _decoded(name: str) -> str | None:
    with contextlib.suppress(ValueError):
        return None if is_hashed(name) else decode_name(name)
    return None


def _target(store: Store, path: Path, stamp: str) -> Path:
    target = store.quarantine / stamp / path.relative_to(store.root)
    target.parent.mkdir(parents=True, exist_ok=True)
    return target


def _move(store: Store, path: Path, stamp: str) -> None:
    """Move ``path`` to ``quarantine/<stamp>/<its path under the root>`` (if it exists)."""
    if path.exists():
        target = _target(store, path, stamp)
        path.rename(target)
        with contextlib.suppress(OSError):
            sync_dir(target.parent)  # both ends: a power loss must not lose the file
            sync_dir(path.parent)

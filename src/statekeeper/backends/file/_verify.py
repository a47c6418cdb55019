"""``FileCheckpointer.verify()``: find damaged files and, if asked, move them aside.

Checked per namespace, under the thread's lock (so no writer is halfway through it):

* the ``checkpoints`` and ``writes`` logs: header, every line's checksum, ids in order;
* every record in ``values/``: checksum, length, kind, and that its own ids map back to
  its file name;
* every checkpoint: each value record it needs, down its delta chain, is in an intact
  line and, if it has a file, that file is intact; its writes lines are intact. A
  checkpoint that fails only because of something else is reported too (with the
  ``checkpoints`` file as its path), since it can no longer be loaded.

Quarantine moves each damaged value file to ``quarantine/<timestamp>/<its path>``; when
lines of a log are damaged or belong to checkpoints that cannot be loaded, the log is
copied there whole and rewritten without them (a checkpoint's line stays as a deleted
line while others use values stored in it, see _file_retire). That leaves a store in
which every listed checkpoint loads. Nothing is deleted, except temporary files of
interrupted writes, which never held a committed checkpoint, and what interrupted
deletes and copies left in ``trash/``. Files in ``values/`` whose names cannot be ours
are ignored.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from statekeeper._storage.deltas import MAX_CHAIN
from statekeeper._storage.files import TEMP_PREFIX, read_bytes, replace_file, sync_dir
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
    value_file_name,
)
from statekeeper.backends.file._namespace import (
    SUBDIRS,
    Damaged,
    Namespace,
    names_in,
    read_record,
    record_names,
)
from statekeeper.backends.file._records import Store, thread_locks, trash_lock
from statekeeper.backends.file._retire import retire
from statekeeper.backends.file._values import record_of
from statekeeper.checkpointers.semantics import version_key

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
    """Every problem of one namespace, in the order the module docstring lists the checks;
    with ``quarantine``, also set aside what is damaged (:func:`_quarantine`)."""
    _remove_temporary_files(n)
    entries, damage = _read_log(n, CHECKPOINTS)
    writes, writes_damage = _read_log(n, WRITES)
    findings = _Findings(n, entries, writes, index_damaged=bool(damage))
    findings.add_damage(n.index, damage)
    findings.add_damage(n.writes_log, writes_damage)
    findings.bad_writes.update(d.checkpoint_id for d in writes_damage)
    _check_write_rows(findings)
    damaged = _check_records(findings)
    _check_checkpoints(findings, damaged)
    if quarantine and findings.problems:
        _quarantine(store, findings, stamp)
    return findings.problems


@dataclass
class _Findings:
    """What the checks of one namespace found so far, and what quarantine acts on."""

    n: Namespace
    entries: list[Entry]  # the intact lines of the checkpoints log
    writes: list[Entry]  # the intact lines of the writes log
    index_damaged: bool  # the checkpoints log has a damaged line or header
    problems: list[CorruptFile] = field(default_factory=list)
    # checkpoints whose writes cannot be read: the id of every damaged line of the writes
    # log (None for its header), so this is empty only if that log is intact
    bad_writes: set[str | None] = field(default_factory=set)
    doomed: set[str] = field(default_factory=set)  # checkpoints that cannot be loaded

    def add(self, path: Path, reason: str, checkpoint_id: str | None = None) -> None:
        n = self.n
        self.problems.append(CorruptFile(path, reason, n.thread_id, n.ns, checkpoint_id))

    def add_damage(self, log: Path, damage: list[DamagedIndex]) -> None:
        for d in damage:
            self.add(log, str(d), d.checkpoint_id)


def _remove_temporary_files(n: Namespace) -> None:
    """Delete what interrupted writes left: they never held a committed checkpoint."""
    for folder in (n.dir, *(n.dir / sub for sub in SUBDIRS)):
        for name in os.listdir(folder) if folder.is_dir() else ():  # noqa: PTH208
            if name.startswith(TEMP_PREFIX):
                (folder / name).unlink(missing_ok=True)


def _check_write_rows(findings: _Findings) -> None:
    """Read each checkpoint's writes from intact lines; a checkpoint whose rows cannot be
    read is reported once (not again if its line was already reported damaged)."""
    n = findings.n
    for checkpoint_id in sorted({e.checkpoint_id for e in findings.writes}):
        try:
            n.write_rows(checkpoint_id)
        except Damaged as exc:
            if checkpoint_id not in findings.bad_writes:
                findings.add(n.writes_log, exc.reason, checkpoint_id)
                findings.bad_writes.add(checkpoint_id)


def _check_records(findings: _Findings) -> set[str]:
    """Check every value file of ours; return the names of the damaged ones."""
    n = findings.n
    damaged: set[str] = set()
    for name in record_names(n.values_dir):  # other names are not ours
        path = n.values_dir / name
        try:
            _check_record(path)
        except FileNotFoundError:
            continue
        except Damaged as exc:
            damaged.add(name)
            findings.add(path, exc.reason)
    return damaged


def _check_checkpoints(findings: _Findings, damaged: set[str]) -> None:
    """Report (and doom) each listed checkpoint that can no longer be loaded."""
    n = findings.n
    by_id = {e.checkpoint_id: e for e in findings.entries}
    for entry in findings.entries:
        if entry.deleted:
            continue
        needs = _needs(n, entry, by_id, damaged)
        if entry.checkpoint_id in findings.bad_writes:
            needs.append(f"its writes in {n.writes_log.name} are damaged")
        if needs:
            reason = f"checkpoint {entry.checkpoint_id!r} cannot be loaded: " + "; ".join(needs)
            findings.add(n.index, reason, entry.checkpoint_id)
            findings.doomed.add(entry.checkpoint_id)


def _quarantine(store: Store, findings: _Findings, stamp: str) -> None:
    """Move each damaged value file aside; keep a copy of each log with damaged lines or
    lines of checkpoints that cannot load, and rewrite it without them."""
    n, doomed = findings.n, findings.doomed
    for item in findings.problems:
        if item.path not in (n.index, n.writes_log):
            _move(store, item.path, stamp)
    if findings.index_damaged or doomed:  # keep the whole file aside, then drop what cannot load
        _keep_copy(store, n.index, stamp)
        kept = retire(findings.entries, doomed)
        _file_index.rewrite(n.index, CHECKPOINTS, n.thread_id, n.ns, kept, durable=store.durable)
    if findings.bad_writes or any(e.checkpoint_id in doomed for e in findings.writes):
        _keep_copy(store, n.writes_log, stamp)
        dropped = doomed | findings.bad_writes
        left = [e for e in findings.writes if e.checkpoint_id not in dropped]
        _file_index.rewrite(n.writes_log, WRITES, n.thread_id, n.ns, left, durable=store.durable)


def _keep_copy(store: Store, path: Path, stamp: str) -> None:
    """Copy ``path`` whole into quarantine, durably, before it is rewritten."""
    target = _target(store, path, stamp)
    replace_file(target, read_bytes(path), durable=store.durable)
    if store.durable:  # the copy must outlive a power loss before the rewrite
        sync_dir(target.parent)


def _read_log(n: Namespace, kind: str) -> tuple[list[Entry], list[DamagedIndex]]:
    """The intact lines of a log (damaged ones skipped) and what is wrong, if anything."""
    damage: list[DamagedIndex] = []
    try:
        with IndexView(n.dir / kind, on_damage=damage.append, kind=kind) as view:
            entries = view.all()
            try:
                header = view.header()
            except DamagedIndex as exc:
                header = {}
                damage.append(exc)
    except FileNotFoundError:
        return [], []
    except DamagedIndex as exc:  # not even a header line: nothing in it can be read
        return [], [exc]
    if header and (header.get("thread_id"), header.get("checkpoint_ns")) != (n.thread_id, n.ns):
        damage.append(DamagedIndex("its header names another thread or namespace"))
    ids = [e.checkpoint_id for e in entries]
    if any(a > b or (a == b and kind == CHECKPOINTS) for a, b in itertools.pairwise(ids)):
        damage.append(DamagedIndex("its lines are not in checkpoint id order"))
    return entries, damage


def _check_record(path: Path) -> None:
    """Raise Damaged unless ``path`` holds an intact value record of its own name."""
    meta = read_record(path, "value")[0]
    try:
        expected = value_file_name(meta["channel"], meta["version"])
    except (KeyError, TypeError, AttributeError) as exc:
        raise Damaged(path, f"malformed value record ({exc!r})") from None
    if expected != path.name:
        raise Damaged(path, "its content belongs to another file name")


def _needs(n: Namespace, entry: Entry, by_id: dict[str, Entry], damaged: set[str]) -> list[str]:
    """What a checkpoint needs that is damaged or missing: the line holding a value
    record, the record's file, or either of those down the chain of append deltas that
    value is built on."""
    needs = []
    versions = entry.record["channel_versions"]
    for channel, at in entry.record["values"].items():
        if channel not in versions or not isinstance(at, str):
            needs.append(f"its reference to the value of {channel!r} is malformed")
            continue
        key = first = version_key(versions[channel])
        for _ in range(MAX_CHAIN + 2):
            via = "" if key == first else f" (through the delta chain of {channel!r} at {first})"
            holder = by_id.get(at)
            record = record_of(holder, channel, key) if holder is not None else None
            if holder is None:
                needs.append(
                    f"the line of checkpoint {at!r} holding {channel!r} is damaged or missing{via}"
                )
            elif record is None:
                needs.append(
                    f"the line of checkpoint {at!r} holds no value of {channel!r} at {key}{via}"
                )
            elif isinstance(name := record.get("file"), str) and name in damaged:
                needs.append(f"its value file {name} is damaged{via}")
            elif isinstance(name, str) and not (n.values_dir / name).exists():
                needs.append(f"its value file {name} is missing{via}")
            elif "base" in record:
                at, key = record.get("base_at"), version_key(record["base"])
                continue
            break
        else:
            needs.append(f"the delta chain of {channel!r} at {first} does not end")
    return needs


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

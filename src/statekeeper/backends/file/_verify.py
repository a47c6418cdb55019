"""``FileCheckpointer.verify()``: find damaged files and, if asked, move them aside or
rebuild what can be rebuilt.

Checked per thread, under the thread's locks (so no writer is halfway through it; on
read-only storage, shared locks on the lock files that exist, creating none):

* the thread's manifest: intact, and every namespace it lists is there;

Then per namespace:

* the ``checkpoints`` and ``writes`` logs: header, every line's checksum, ids in order,
  the chain of checksums from line to line, and the log against its head (a log shorter
  than its head, an older copy, a missing or damaged head, a missing log whose head
  says lines were committed);
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

Repair (:func:`~._log.check.repair_log`) rebuilds heads and manifests from what is there,
writes a log with a broken chain again, and never removes a line: what was lost was
reported.

Last, the index (``index/``) is checked against each thread, under its locks: damaged or
missing files, a checkpoint it lacks, a head other than the thread's are reported (what a
killed writer leaves, the index ahead of the threads, is not damage); so is a thread it
gives a newest checkpoint whose folder is missing (no writer leaves that: its checkpoints
were lost). A repair or a quarantine that changed anything, or found the index damaged or
ahead, rebuilds it.

A ``threads`` folder that is not a folder is reported alone: no thread can be checked.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

from statekeeper._storage.files import TEMP_PREFIX, read_bytes, replace_file, sync_dir
from statekeeper._storage.remembered import MAX_CHAIN
from statekeeper.backends.file._directory import trash_lock
from statekeeper.backends.file._layout import (
    decode_name,
    file_name,
    is_hashed,
    value_file_name,
)
from statekeeper.backends.file._log import write as _log
from statekeeper.backends.file._log.catalog_view import Audit
from statekeeper.backends.file._log.check import LogCheck, check_log, repair_log
from statekeeper.backends.file._log.head import head_path
from statekeeper.backends.file._log.lines import CHECKPOINTS, WRITES, DamagedIndex, Entry
from statekeeper.backends.file._log.manifest import MANIFEST, read_manifest, write_manifest
from statekeeper.backends.file._log.view import IndexView, Lost
from statekeeper.backends.file._namespace import (
    SUBDIRS,
    Damaged,
    Namespace,
    has_lines,
    names_in,
    read_record,
    record_names,
)
from statekeeper.backends.file._reads import scan_thread, scan_threads
from statekeeper.backends.file._records import Store, thread_locks
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
    record: str | None = None


@dataclass(frozen=True)
class _Asked:
    """What ``verify`` was asked to do besides checking, and the quarantine folder name."""

    quarantine: bool
    repair: bool
    stamp: str


def verify(store: Store, *, quarantine: bool, repair: bool) -> list[CorruptFile]:
    """See the module docstring. Thread by thread; returns every problem found (before
    anything was moved or repaired). On read-only storage nothing is changed (the
    caller refuses ``quarantine`` and ``repair`` there). A ``threads`` folder that is not
    one is the one problem reported (and nothing is changed): no thread can be checked."""
    if (problem := store.threads_problem()) is not None:
        reason = f"threads/ {problem}: no thread can be read"
        return [CorruptFile(store.threads, reason, record="index")]
    if not store.read_only:
        _empty_trash(store)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ") + f"-{os.getpid()}"
    asked = _Asked(quarantine, repair, stamp)
    found: list[CorruptFile] = []
    catalog = store.catalog
    audit = Audit(catalog.contents, catalog.stamp) if catalog.used else None
    for thread_name in names_in(store.threads):
        thread_dir = store.threads / thread_name
        if not thread_dir.is_dir():
            continue
        locks = thread_locks(thread_name)  # named after the folder
        held = store.locks.hold_shared(*locks) if store.read_only else store.locks.hold(*locks)
        with held:
            if audit is not None and (scanned := scan_thread(store, thread_dir)).thread_id:
                audit.check(scanned.thread_id, scanned.checkpoints, scanned.head)  # as found
            found.extend(_verify_thread(store, thread_dir, asked))
    if audit is None:
        return found
    for thread_id in audit.unseen():
        thread_dir = store.thread_dir(thread_id)
        locks = thread_locks(thread_dir.name)
        held = store.locks.hold_shared(*locks) if store.read_only else store.locks.hold(*locks)
        with held:
            if not thread_dir.exists():
                audit.missing(thread_id)
    index = [
        CorruptFile(path or catalog.folder, reason, record="index")
        for reason, path in audit.findings()
    ]
    index += [
        CorruptFile(
            store.thread_dir(thread_id),
            f"the index lists thread {thread_id!r} (newest checkpoint {head!r}), but its "
            "folder is missing: its checkpoints are lost",
            thread_id,
            record="index",
        )
        for thread_id, head in audit.gone
    ]
    if (quarantine or repair) and (index or audit.ahead or found):  # rebuilt: reads use it
        catalog.rebuild(lambda: scan_threads(store), wait=True)
        index = [replace(f, reason=f"{f.reason} [rebuilt from the threads]") for f in index]
    return found + index


def _verify_thread(store: Store, thread_dir: Path, asked: _Asked) -> list[CorruptFile]:
    """Every problem of one thread folder: its namespaces and its manifest."""
    found: list[CorruptFile] = []
    namespaces: dict[str, Namespace] = {}
    moved = set()
    thread_id = None if is_hashed(thread_dir.name) else _decoded(thread_dir.name)
    for ns_name in names_in(thread_dir):
        ns_dir = thread_dir / ns_name
        n = _namespace(store, ns_dir) if ns_dir.is_dir() else None
        if isinstance(n, CorruptFile):
            found.append(n)
            moved.add(ns_name)  # checked no further (moved aside, if quarantining)
            if asked.quarantine:
                _move(store, ns_dir, asked.stamp)
        elif n is not None:
            namespaces[n.ns] = n
            thread_id = n.thread_id
    problems, listed = _check_manifest(store, thread_dir, thread_id, namespaces)
    thread_id = thread_id or listed.thread_id
    for ns in sorted(listed.namespaces - namespaces.keys()):
        folder = thread_dir / file_name(ns)
        if folder.name in moved:
            continue
        if folder.is_dir() and thread_id is not None:  # its logs are gone
            namespaces[ns] = Namespace(thread_id, ns, folder, store.durable, store.heads)
        else:
            reason = f"the thread's manifest lists namespace {ns!r}, but its folder is missing"
            problems.append(CorruptFile(folder, reason, thread_id, ns, None, "checkpoint"))
    for n in namespaces.values():
        found.extend(_verify_namespace(store, n, asked))
    found.extend(problems)
    moved_any = asked.quarantine and bool(moved)
    if thread_id and ((problems and asked.repair) or moved_any):
        kept = {ns for ns, n in namespaces.items() if n.index.exists()}
        write_manifest(thread_dir, thread_id, kept, durable=store.durable)
    return found


class _Listed(NamedTuple):
    thread_id: str | None
    namespaces: set[str]


def _check_manifest(
    store: Store, thread_dir: Path, thread_id: str | None, namespaces: dict[str, Namespace]
) -> tuple[list[CorruptFile], _Listed]:
    """What is wrong with the thread's manifest, and what it lists."""
    path = thread_dir / MANIFEST
    if not store.heads:
        return [], _Listed(None, set())
    try:
        manifest = read_manifest(thread_dir, None)
    except DamagedIndex as exc:
        return [CorruptFile(path, str(exc), thread_id, None, None, "index")], _Listed(None, set())
    committed = [ns for ns, n in namespaces.items() if has_lines(n.index, CHECKPOINTS)]
    if manifest is None:
        if not committed:
            return [], _Listed(None, set())
        reason = "the thread's manifest is missing, but it has checkpoints"
        return [CorruptFile(path, reason, thread_id, None, None, "index")], _Listed(None, set())
    problems = []
    if thread_id is not None and manifest.thread_id != thread_id:
        reason = f"it names another thread ({manifest.thread_id!r})"
        problems.append(CorruptFile(path, reason, thread_id, None, None, "index"))
    for ns in sorted(set(committed) - manifest.namespaces):
        reason = f"it does not list namespace {ns!r}, which has checkpoints"
        problems.append(CorruptFile(path, reason, thread_id, ns, None, "index"))
    return problems, _Listed(manifest.thread_id, manifest.namespaces)


def _decoded(name: str) -> str | None:
    try:
        return decode_name(name)
    except ValueError:
        return None


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
        return Namespace(*ids, ns_dir, store.durable, store.heads)
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
        return CorruptFile(ns_dir / "checkpoints", reason, record="index")
    return Namespace(*ids, ns_dir, store.durable, store.heads)


def _verify_namespace(store: Store, n: Namespace, asked: _Asked) -> list[CorruptFile]:
    """Every problem of one namespace, in the order the module docstring lists the checks;
    with ``quarantine``, also set aside what is damaged (:func:`_quarantine`); with
    ``repair``, then rebuild what can be (:func:`~._log.check.repair_log`)."""
    if not store.read_only:
        _remove_temporary_files(n)
    checks = _check_logs(store, n)
    log, writes = checks
    findings = _Findings(n, log.entries, writes.entries, index_damaged=bool(log.damage))
    for check in checks:
        findings.add_damage(check.path, check.damage + [lost.damage for lost in check.lost])
    findings.bad_writes.update(d.checkpoint_id for d in writes.damage)
    findings.lost_writes = writes.lost
    _check_write_rows(findings, {p.reason for p in findings.problems})
    damaged = _check_records(findings)
    _check_checkpoints(findings, damaged)
    if asked.quarantine and findings.problems:
        _quarantine(store, findings, asked.stamp)
    if asked.repair and findings.problems:
        for check in _check_logs(store, n):  # again: quarantine may have rewritten them

            def keep(path: Path) -> None:
                _keep_copy(store, path, asked.stamp)

            repair_log(check, (n.thread_id, n.ns), durable=store.durable, keep=keep)
    return findings.problems


def _check_logs(store: Store, n: Namespace) -> tuple[LogCheck, LogCheck]:
    ids = (n.thread_id, n.ns)
    return (
        check_log(
            n.index, CHECKPOINTS, ids, heads=store.heads, missing=lambda: n.missing(CHECKPOINTS)
        ),
        check_log(n.writes_log, WRITES, ids, heads=store.heads, missing=lambda: n.missing(WRITES)),
    )


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
    lost_writes: list[Lost] = field(default_factory=list)  # writes lines the log lacks
    doomed: set[str] = field(default_factory=set)  # checkpoints that cannot be loaded

    def add(
        self, path: Path, reason: str, checkpoint_id: str | None = None, record: str | None = None
    ) -> None:
        n = self.n
        self.problems.append(CorruptFile(path, reason, n.thread_id, n.ns, checkpoint_id, record))

    def add_damage(self, log: Path, damage: list[DamagedIndex]) -> None:
        for d in damage:
            self.add(log, str(d), d.checkpoint_id, d.record)


def _remove_temporary_files(n: Namespace) -> None:
    """Delete what interrupted writes left: they never held a committed checkpoint."""
    for folder in (n.dir, *(n.dir / sub for sub in SUBDIRS)):
        for name in os.listdir(folder) if folder.is_dir() else ():  # noqa: PTH208
            if name.startswith(TEMP_PREFIX):
                (folder / name).unlink(missing_ok=True)


def _check_write_rows(findings: _Findings, reported: set[str]) -> None:
    """Read the writes of each checkpoint (of either log) as a reader would: a checkpoint
    whose rows cannot be read — a damaged line may be one of them, whatever id it shows,
    or a line is malformed — goes in ``bad_writes``, and is reported unless what is wrong
    was already (``reported``: the reasons found so far)."""
    n = findings.n
    ids = {e.checkpoint_id for e in findings.writes} | {e.checkpoint_id for e in findings.entries}
    for checkpoint_id in sorted(ids):
        try:
            n.write_rows(checkpoint_id)
        except Damaged as exc:
            if checkpoint_id not in findings.bad_writes and exc.reason not in reported:
                findings.add(n.writes_log, exc.reason, checkpoint_id, "writes")
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
            findings.add(path, exc.reason, None, "value")
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
            needs.append((f"its writes in {n.writes_log.name} are damaged", "writes"))
        elif any(lost.covers(entry.checkpoint_id) for lost in findings.lost_writes):
            needs.append((f"its writes in {n.writes_log.name} may be lost", "writes"))
        if needs:
            because = "; ".join(reason for reason, _ in needs)
            reason = f"checkpoint {entry.checkpoint_id!r} cannot be loaded: {because}"
            findings.add(n.index, reason, entry.checkpoint_id, needs[0][1])
            findings.doomed.add(entry.checkpoint_id)


def _quarantine(store: Store, findings: _Findings, stamp: str) -> None:
    """Move each damaged value file aside; keep a copy of each log with damaged lines or
    lines of checkpoints that cannot load, and rewrite it without them."""
    n, doomed = findings.n, findings.doomed
    for head in (head_path(n.index), head_path(n.writes_log)):  # a rewrite writes it anew
        if head.is_dir():
            _move(store, head, stamp)
    for item in findings.problems:
        if item.path not in (n.index, n.writes_log):
            _move(store, item.path, stamp)
    if findings.index_damaged or doomed:  # keep the whole file aside, then drop what cannot load
        _keep_copy(store, n.index, stamp)
        kept = retire(findings.entries, doomed)
        _log.rewrite(n.index, CHECKPOINTS, n.thread_id, n.ns, kept, durable=store.durable)
    if findings.bad_writes or any(e.checkpoint_id in doomed for e in findings.writes):
        _keep_copy(store, n.writes_log, stamp)
        dropped = doomed | findings.bad_writes
        left = [e for e in findings.writes if e.checkpoint_id not in dropped]
        _log.rewrite(n.writes_log, WRITES, n.thread_id, n.ns, left, durable=store.durable)


def _keep_copy(store: Store, path: Path, stamp: str) -> None:
    """Copy ``path`` whole into quarantine, durably, before it is rewritten (if it is
    there); a directory in its place is moved there."""
    if not path.exists():
        return
    if path.is_dir():  # no bytes to copy, and the rewrite needs its name
        _move(store, path, stamp)
        return
    target = _target(store, path, stamp)
    replace_file(target, read_bytes(path), durable=store.durable)
    if store.durable:  # the copy must outlive a power loss before the rewrite
        sync_dir(target.parent)


def _check_record(path: Path) -> None:
    """Raise Damaged unless ``path`` holds an intact value record of its own name."""
    meta = read_record(path, "value")[0]
    try:
        expected = value_file_name(meta["channel"], meta["version"])
    except (KeyError, TypeError, AttributeError) as exc:
        raise Damaged(path, f"malformed value record ({exc!r})") from None
    if expected != path.name:
        raise Damaged(path, "its content belongs to another file name")


def _needs(
    n: Namespace, entry: Entry, by_id: dict[str, Entry], damaged: set[str]
) -> list[tuple[str, str]]:
    """What a checkpoint needs that is damaged or missing: the line holding a value
    record, the record's file, or either of those down the chain of append deltas that
    value is built on; each with the kind of record at fault."""
    needs: list[tuple[str, str]] = []
    versions = entry.record["channel_versions"]
    for channel, at in entry.record["values"].items():
        if channel not in versions or not isinstance(at, str):
            needs.append((f"its reference to the value of {channel!r} is malformed", "checkpoint"))
            continue
        key = first = version_key(versions[channel])
        for _ in range(MAX_CHAIN + 2):
            via = "" if key == first else f" (through the delta chain of {channel!r} at {first})"
            kind = "value" if key == first else "delta"
            holder = by_id.get(at)
            record = record_of(holder, channel, key) if holder is not None else None
            if holder is None:
                reason = f"the line of checkpoint {at!r} holding {channel!r} is damaged or missing"
                needs.append((reason + via, kind))
            elif record is None:
                reason = f"the line of checkpoint {at!r} holds no value of {channel!r} at {key}"
                needs.append((reason + via, kind))
            elif isinstance(name := record.get("file"), str) and name in damaged:
                needs.append((f"its value file {name} is damaged{via}", kind))
            elif isinstance(name, str) and not (n.values_dir / name).exists():
                needs.append((f"its value file {name} is missing{via}", kind))
            elif "base" in record:
                at, key = record.get("base_at"), version_key(record["base"])
                continue
            break
        else:
            needs.append((f"the delta chain of {channel!r} at {first} does not end", "delta"))
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

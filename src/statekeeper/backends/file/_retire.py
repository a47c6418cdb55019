"""Removing and replacing lines of a ``checkpoints`` file without losing a value in use.

A value record lives in the line of the checkpoint that stored it, and later checkpoints
refer to it there (``"values"``, and a delta's ``"base_at"``). So a line cannot simply go:

* deleting a checkpoint (``delete_for_runs``, ``prune``, ``verify(quarantine=True)``)
  turns its line into a *deleted* line — ``{"checkpoint_id", "deleted": true, "stored"}``
  — holding only the records the remaining checkpoints use, directly or down a delta
  chain, or removes it when they use none; deleted lines are trimmed the same way each
  time, and never listed or loaded;
* storing a checkpoint again under an existing id carries the old line's records that
  other checkpoints use into the new line, and stores every delta built on a record the
  new line replaces with other content as a full copy, so it keeps its value.

Everything here works on whole files read into memory: these are the rare paths that
rewrite the file anyway.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from statekeeper._storage.deltas import StoredValue
from statekeeper.backends.file._log.lines import Entry, make_entry
from statekeeper.backends.file._namespace import Namespace
from statekeeper.backends.file._values import encode_record, read_value, record_of
from statekeeper.checkpointers.semantics import version_key

__all__ = ["files_of", "needed", "replace", "retire"]

Ref = tuple[str, str, str]  # (id of the line holding it, channel, version key)


def _key(record: dict[str, Any]) -> tuple[str, str]:
    return record["channel"], version_key(record["version"])


def _refs(entry: Entry) -> Iterator[Ref]:
    versions = entry.record["channel_versions"]
    for channel, at in entry.record["values"].items():
        if channel in versions:
            yield at, channel, version_key(versions[channel])


def needed(entries: Sequence[Entry]) -> set[Ref]:
    """The records the live (not deleted) lines of ``entries`` use, directly or as the
    base of a delta they use (records missing from ``entries`` are left out)."""
    by_id = {e.checkpoint_id: e for e in entries}
    pending = [ref for e in entries if not e.deleted for ref in _refs(e)]
    found: set[Ref] = set()
    while pending:
        ref = pending.pop()
        holder = by_id.get(ref[0])
        record = record_of(holder, ref[1], ref[2]) if holder is not None else None
        if ref in found or record is None:
            continue
        found.add(ref)
        if "base" in record and isinstance(record.get("base_at"), str):
            pending.append((record["base_at"], ref[1], version_key(record["base"])))
    return found


def retire(entries: Sequence[Entry], doomed: Iterable[str]) -> list[Entry]:
    """The lines left once the checkpoints ``doomed`` are deleted: the others as they
    are, and each doomed or deleted line as a deleted line holding what they still use
    (or nothing: then it goes)."""
    doomed = set(doomed)
    kept = [
        e if e.checkpoint_id not in doomed else make_entry({**e.record, "deleted": True})
        for e in entries
    ]
    use = needed(kept)
    result = []
    for entry in kept:
        if not entry.deleted:
            result.append(entry)
            continue
        stored = [r for r in entry.record["stored"] if (entry.checkpoint_id, *_key(r)) in use]
        if not stored:
            continue
        if stored != entry.record["stored"] or set(entry.record) != _DELETED_KEYS:
            record = {"checkpoint_id": entry.checkpoint_id, "deleted": True, "stored": stored}
            entry = make_entry(record)
        result.append(entry)
    return result


_DELETED_KEYS = {"checkpoint_id", "deleted", "stored"}


def files_of(entries: Iterable[Entry]) -> set[str]:
    """The names in ``values/`` that the records of ``entries`` keep their bytes in."""
    return {
        r["file"] for e in entries for r in e.record["stored"] if isinstance(r.get("file"), str)
    }


def replace(n: Namespace, old: Entry, entries: list[Entry]) -> list[Entry]:
    """``entries`` (every line, ``old``'s replaced by its new line) adjusted so that no
    other checkpoint loses a value: see the module docstring. Files of full copies are
    written (and flushed) here; the caller rewrites the file with the result."""
    new = next(e for e in entries if e.checkpoint_id == old.checkpoint_id)
    new_records = {_key(r): r for r in new.record["stored"]}
    changed = {
        key
        for r in old.record["stored"]
        if (key := _key(r)) in new_records and _content(new_records[key]) != _content(r)
    }
    carried = [r for r in old.record["stored"] if _key(r) not in new_records]
    before = {e.checkpoint_id: e for e in entries} | {old.checkpoint_id: old}
    result = []
    for entry in entries:
        if entry is new:
            entry = make_entry({**new.record, "stored": new.record["stored"] + carried})
        elif changed:
            entry = _detach(n, entry, old.checkpoint_id, changed, before)
        result.append(entry)
    # carried records nobody uses are not kept
    use = needed(result)
    final = []
    for entry in result:
        if entry.checkpoint_id == old.checkpoint_id and carried:
            stored = [
                r
                for r in entry.record["stored"]
                if r not in carried or (entry.checkpoint_id, *_key(r)) in use
            ]
            entry = make_entry({**entry.record, "stored": stored})
        final.append(entry)
    return final


def _content(record: dict[str, Any]) -> tuple[Any, ...]:
    return record.get("type"), record.get("crc"), record.get("base"), record.get("base_at")


def _detach(
    n: Namespace, entry: Entry, at: str, changed: set[tuple[str, str]], before: dict[str, Entry]
) -> Entry:
    """``entry`` with its deltas built on a changed record of the line ``at`` stored as
    full copies (read as they were ``before``)."""
    stored = []
    touched = False
    for record in entry.record["stored"]:
        base = record.get("base")
        if (
            base is not None
            and record.get("base_at") == at
            and (record["channel"], version_key(base)) in changed
        ):
            channel, version = record["channel"], record["version"]
            type_, codec, data = read_value(n, before.get, entry.checkpoint_id, channel, version)
            full = StoredValue(channel, version_key(version), type_, codec, data)
            record = encode_record(n, full, version) | {"crc": record.get("crc")}
            touched = True
        stored.append(record)
    if not touched:
        return entry
    n.sync(n.values_dir)
    return make_entry({**entry.record, "stored": stored})

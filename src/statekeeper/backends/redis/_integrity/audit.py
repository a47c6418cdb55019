"""The checks ``verify()`` runs on one thread of the Redis checkpointer, over a snapshot
of its eight keys: what is damaged (:class:`~statekeeper.errors.Damage`) and what a
repair may rebuild from intact records (:class:`Fix` operations for the ``REPAIR``
script). Pure: the snapshot is read, and the fixes applied, by :mod:`.verify`.

A repair never touches a damaged record or value: it adds the index members, reference
counts, write counts and base/CRC entries that intact records call for, drops index
members whose record, write or value is gone (the loss stays reported), and seals
layout-1 records, values and writes (no checksum yet) as they are.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper.backends.redis._client import split_ordered
from statekeeper.backends.redis._integrity.checked import checked_checkpoint
from statekeeper.backends.redis._integrity.records import (
    Payloads,
    Record,
    decode_writes,
    parse_value,
)
from statekeeper.backends.redis._integrity.seal import SEAL, Bad, damage, seal
from statekeeper.backends.redis._layout import END, first, swap
from statekeeper.backends.redis._lua import STAMP, THREAD_KEYS, WCOUNT
from statekeeper.errors import Damage, SerializationError

__all__ = ["Audit", "Fix", "Snapshot"]

_KEY = {name: i + 1 for i, name in enumerate(THREAD_KEYS)}  # KEYS index in REPAIR
_BASE, _CRC = b"\xfe", b"\xff"  # refs: + value field -> its base field, its CRC


@dataclass
class Snapshot:
    """The eight keys of one thread, read whole (a wrong-type key reads as empty)."""

    ids: set[bytes] = field(default_factory=set)
    ns: set[bytes] = field(default_factory=set)
    runs: set[bytes] = field(default_factory=set)
    wix: set[bytes] = field(default_factory=set)
    cp: dict[bytes, bytes] = field(default_factory=dict)
    blobs: dict[bytes, bytes] = field(default_factory=dict)
    refs: dict[bytes, bytes] = field(default_factory=dict)
    writes: dict[bytes, bytes] = field(default_factory=dict)


Fix = tuple[Any, ...]  # one REPAIR operation: ("za", key index, member), ...


class Audit:
    """Checks one thread's snapshot (see the module docstring): :attr:`found` lists the
    damage, :attr:`fixes` what a repair does; :attr:`counts_safe` is False when a record
    could not be read, so the values it references are unknown and reference counts
    must not be lowered."""

    def __init__(
        self, serde: SerializerProtocol, thread_id: str, keys: dict[str, bytes], snap: Snapshot
    ) -> None:
        self.serde = serde
        self.thread_id = thread_id
        self.keys = keys
        self.snap = snap
        self.found: list[Damage] = []
        self.fixes: list[Fix] = []
        self.counts_safe = True
        self.records: dict[bytes, Record] = {}
        self.bad_values: dict[bytes, str] = {}  # value field -> why it cannot be read

    def run(self) -> Audit:
        self._records()
        self._indexes()
        self._values()
        self._loads()
        if self.counts_safe:
            self._counts()
        self._writes()
        self._stamp()
        return self

    def _report(self, bad: Bad, ref: bytes | None = None) -> None:
        ns = checkpoint_id = None
        if ref is not None:
            ns, checkpoint_id = _place(ref) or (None, None)
        self.found.append(damage(bad, self.keys, self.thread_id, ns, checkpoint_id))

    # -- records and the indexes that list them -------------------------------------------

    def _records(self) -> None:
        snap = self.snap
        for ref, data in snap.cp.items():
            place = _place(ref)
            if place is None:
                self._report(Bad("a field of cp is not a checkpoint reference", "index", "cp", ref))
                self.counts_safe = False
                continue
            try:
                record = Record.parse(data, ref)
                checked_checkpoint(self.serde, record, ref, place[1])
            except Bad as bad:
                self._report(bad, ref)
                self.counts_safe = False
                continue
            except SerializationError as exc:  # intact, but not this serde's
                self._report(Bad(f"it cannot be decoded ({exc})", "checkpoint", "cp", ref), ref)
            self.records[ref] = record
            if not record.sealed:
                self.fixes.append(("cas", _KEY["cp"], ref, data, seal(ref, data)))
            if ref not in snap.ns:
                self._index(ref, "ns", ref)
            if swap(ref) not in snap.ids:
                self._index(ref, "ids", swap(ref))
            if record.run and record.run + ref not in snap.runs:
                self._index(ref, "runs", record.run + ref)

    def _index(self, ref: bytes, key: str, member: bytes) -> None:
        """An intact record's member missing from index ``key``: a repair adds it."""
        self._report(Bad(f"its {key} member is missing", "index", key, member), ref)
        self.fixes.append(("za", _KEY[key], member))

    def _indexes(self) -> None:
        """Index members without their record: the record is lost (reported); a repair
        drops the members, so that reads serve what is intact."""
        snap = self.snap
        lost = {ref for ref in snap.ns if ref not in snap.cp}
        for member in snap.ids:
            try:
                ref = swap(member)
            except ValueError:
                ref = member
            if ref not in snap.cp:
                lost.add(ref)
                self.fixes.append(("zr", _KEY["ids"], member))
        for ref in sorted(lost):
            reason = "the indexes list it but its record is missing from cp"
            self._report(Bad(reason, "checkpoint", "cp", ref), ref)
            if ref in snap.ns:
                self.fixes.append(("zr", _KEY["ns"], ref))
        for member in snap.runs:
            run = first(member) if END in member else member
            ref = member[len(run) :]
            record = self.records.get(ref)
            if ref not in snap.cp or (record is not None and record.run != run):
                reason = "a runs member names no checkpoint of that run"
                self._report(Bad(reason, "index", "runs", member), ref)
                self.fixes.append(("zr", _KEY["runs"], member))

    # -- values and deltas ----------------------------------------------------------------

    def _values(self) -> None:
        refs = self.snap.refs
        parsed: dict[bytes, tuple[Any, bytes]] = {}
        for value_field, data in self.snap.blobs.items():
            if not data:
                if _CRC + value_field in refs:
                    reason = "the value was emptied (its CRC is still in refs)"
                    self._value(Bad(reason, "value", "blobs", value_field))
                continue
            try:
                value, base = parse_value(value_field, data)
            except Bad as bad:
                self._value(bad)
                continue
            parsed[value_field] = (value, base)
            if data[:1] != SEAL and value.crc is not None:  # seal its header
                end = len(data) - len(value.data)
                sealed = seal(value_field, data[:end], data[end:], whole=False)
                self.fixes.append(("cas", _KEY["blobs"], value_field, data, sealed))
            self._value_refs(value_field, value.crc, base)
        payloads = Payloads()
        for value_field in parsed:
            if value_field in self.bad_values:
                continue
            try:
                payloads.payload(value_field, _chain(value_field, self.snap.blobs))
            except Bad as bad:
                self._value(Bad(bad.reason, bad.record, "blobs", value_field))

    def _value(self, bad: Bad) -> None:
        self._report(bad)
        if bad.field is not None:
            self.bad_values[bad.field] = bad.reason

    def _value_refs(self, value_field: bytes, crc: int | None, base: bytes) -> None:
        """The CRC and base entries of an intact value in refs, as its frame says."""
        refs = self.snap.refs
        expected = {_CRC + value_field: None if crc is None else b"%d" % crc}
        expected[_BASE + value_field] = base or None
        for name, want in expected.items():
            if refs.get(name) != want:
                reason = f"refs holds a wrong {'CRC' if name[:1] == _CRC else 'base'} of a value"
                self._report(Bad(reason, "index", "refs", name))
                op = ("hs", _KEY["refs"], name, want) if want is not None else None
                self.fixes.append(op or ("hd", _KEY["refs"], name))

    def _loads(self) -> None:
        """Every value a record loads is there and intact."""
        blobs, refs = self.snap.blobs, self.snap.refs
        for ref, record in self.records.items():
            for value_field in record.fields[: record.nload]:
                if value_field not in blobs and _CRC + value_field in refs:
                    reason = "a value it reads is missing from blobs"
                    self._report(Bad(reason, "value", "blobs", value_field), ref)
                elif value_field in self.bad_values:
                    reason = f"a value it reads is damaged: {self.bad_values[value_field]}"
                    self._report(Bad(reason, "value", "blobs", value_field), ref)

    def _counts(self) -> None:
        """Reference counts: one per record referencing a value, one per delta on it."""
        expected: Counter[bytes] = Counter()
        for record in self.records.values():
            expected.update(dict.fromkeys(record.fields, 1))
        for name, base in self.snap.refs.items():
            if name[:1] == _BASE:
                expected[base] += 1
        for value_field, want in expected.items():
            held = self.snap.refs.get(value_field)
            if want and held != b"%d" % want:
                reason = f"refs counts {_text(held)} references to a value used {want} times"
                self._report(Bad(reason, "index", "refs", value_field))
                self.fixes.append(("hs", _KEY["refs"], value_field, b"%d" % want))

    # -- pending writes -------------------------------------------------------------------

    def _writes(self) -> None:
        snap = self.snap
        by_ref: dict[bytes, list[bytes | None]] = {}
        for write_field in sorted(snap.writes.keys() | snap.wix):
            place = _write_place(write_field)
            if place is None:
                self._report(
                    Bad("a write's field is not a write key", "writes", "writes", write_field)
                )
                continue
            ref = place
            value = snap.writes.get(write_field)
            if write_field not in snap.wix:
                self._report(Bad("its wix member is missing", "index", "wix", write_field), ref)
                self.fixes.append(("za", _KEY["wix"], write_field))
            if value is None:
                self._report(
                    Bad(
                        "wix lists it but it is missing from writes",
                        "writes",
                        "writes",
                        write_field,
                    ),
                    ref,
                )
                self.fixes.append(("zr", _KEY["wix"], write_field))
                continue
            by_ref.setdefault(ref, []).extend((write_field, value))
            if value[:1] != SEAL:
                self.fixes.append(
                    ("cas", _KEY["writes"], write_field, value, seal(write_field, value))
                )
        for ref, pairs in by_ref.items():
            try:
                decode_writes(self.serde, pairs, None, None, ref)
            except Bad as bad:
                if bad.key != "refs":  # a missing count is checked below
                    self._report(bad, ref)
            except SerializationError as exc:
                self._report(
                    Bad(f"a write cannot be decoded ({exc})", "writes", "writes", ref), ref
                )
        self._write_counts(by_ref)

    def _write_counts(self, by_ref: dict[bytes, list[bytes | None]]) -> None:
        refs = self.snap.refs
        counted = {name[1:] for name in refs if name[:1] == WCOUNT}
        for ref in by_ref.keys() | counted:
            pairs = by_ref.get(ref, [])
            actual = b"%d" % (len(pairs) // 2)
            held = refs.get(WCOUNT + ref)
            sealed = any(v[:1] == SEAL for v in pairs[1::2] if v is not None)
            if held == actual or (held is None and not sealed and not pairs):
                continue
            if held is not None or sealed:
                reason = (
                    f"refs counts {_text(held)} writes where {actual.decode()} are stored "
                    "(writes or their wix members were deleted)"
                )
                self._report(Bad(reason, "writes", "refs", WCOUNT + ref), ref)
            self.fixes.append(("hs", _KEY["refs"], WCOUNT + ref, actual))

    def _stamp(self) -> None:
        sealed = any(record.sealed for record in self.records.values())
        if sealed and STAMP not in self.snap.refs:
            reason = "its change stamp is missing from refs (refs was deleted or emptied)"
            self._report(Bad(reason, "index", "refs", STAMP))


def _place(ref: bytes) -> tuple[str, str] | None:
    try:
        ns, checkpoint_id, rest = split_ordered(ref)
    except ValueError:
        return None
    return None if rest else (ns, checkpoint_id)


def _write_place(write_field: bytes) -> bytes | None:
    """The checkpoint ref of a write field (ref, ordered task id, index)."""
    try:
        _, _, _, idx = split_ordered(write_field)
        int(idx)
    except ValueError:
        return None
    cut = write_field.index(END) + 2
    return write_field[: write_field.index(END, cut) + 2]


def _chain(value_field: bytes, blobs: dict[bytes, bytes]) -> list[Any]:
    """The links of a value as the READ script gives them: the value and its bases
    (their frames say which), ``[field, b"x"]`` for one missing."""
    links: list[Any] = []
    at = value_field
    for _ in range(64):
        data = blobs.get(at)
        if not data:
            links.append([at, b"x"])
            break
        links.append(data)
        try:
            _, base = parse_value(at, data)
        except Bad:
            break
        if not base:
            break
        at = base
    return links


def _text(held: bytes | None) -> str:
    return "none" if held is None else held.decode(errors="replace")

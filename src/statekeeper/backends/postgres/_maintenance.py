"""What the PostgreSQL checkpointer does to whole threads: delete, copy, prune, and
``verify()``, which checks every record and repairs what can be rebuilt.

Each change is one transaction and keeps the integrity records of :mod:`._integrity` true:
deleting checkpoints subtracts them from their namespace's head, and copying re-checksums
every row for its new thread after verifying the source's, so damage is never blessed.
Deletions that decide what to remove from stored rows verify those rows first and change
nothing when one is damaged. Ids here are as stored (encoded).

``verify`` checks namespace by namespace, each in one snapshot: every ``blobs`` row against its row
checksum and every value's full payload rebuilt (down its delta chain) against its CRC;
every ``checkpoints`` row against its checksums, and that the values it names are stored
as often as when it was written; every ``writes`` row against its checksum, and each
checkpoint's writes against its digest; the namespace's head record against its rows.

``repair`` rebuilds, in one transaction per namespace, head records and writes digests
from the intact rows stored. Rows that fail their checksums are left as they are.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace

from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper._storage.lineage import delta_channels, keep_latest_ids, unused_values
from statekeeper._storage.payload import EMPTY
from statekeeper.backends.postgres import decode_id, encode_id
from statekeeper.backends.postgres._database import Database
from statekeeper.backends.postgres._integrity import (
    check_checkpoint,
    check_value,
    check_writes,
    checkpoint_crc,
    corrupt,
    key_path,
    metadata_crc,
    value_crc,
    with_location,
    write_crc,
)
from statekeeper.backends.postgres._reads import Reader
from statekeeper.backends.postgres._running import BEGIN, BEGIN_READ, COMMIT, Op, Q
from statekeeper.backends.postgres._schema import (
    CHECKPOINT_COLUMNS,
    CHECKPOINTS,
    VALUE_COLUMNS,
    WRITE_COLUMNS,
    CheckpointRow,
    Row,
)
from statekeeper.backends.postgres._writes import jsonb_text
from statekeeper.errors import CorruptCheckpointError, Damage, ThreadExistsError

__all__ = ["Maintenance", "verify"]

NAMESPACE_CHECKPOINTS = (
    f"SELECT {CHECKPOINT_COLUMNS} FROM {CHECKPOINTS}"  # noqa: S608
    " WHERE c.thread_id = %s AND c.checkpoint_ns = %s"
)
NAMESPACE_COUNTS = (
    "SELECT checkpoint_id, writes_count, writes_sum FROM write_counts"
    " WHERE thread_id = %s AND checkpoint_ns = %s"
)
NAMESPACE_VALUES = f"SELECT {VALUE_COLUMNS} FROM blobs WHERE thread_id = %s AND checkpoint_ns = %s"  # noqa: S608
NAMESPACE_WRITES = (
    f"SELECT checkpoint_id, {WRITE_COLUMNS} FROM writes"  # noqa: S608
    " WHERE thread_id = %s AND checkpoint_ns = %s"
)
Key = tuple[str, str, str]


@dataclass(frozen=True)
class Maintenance:
    """The whole-thread operations of one checkpointer, as operations to run."""

    reader: Reader

    def delete_thread(self, thread_id: str) -> Op[None]:
        """Every row of the thread, damaged or not, in one statement."""
        yield Q(
            "WITH a AS (DELETE FROM checkpoints WHERE thread_id = %(t)s),"
            " b AS (DELETE FROM blobs WHERE thread_id = %(t)s),"
            " c AS (DELETE FROM writes WHERE thread_id = %(t)s),"
            " d AS (DELETE FROM write_counts WHERE thread_id = %(t)s)"
            " DELETE FROM heads WHERE thread_id = %(t)s",
            {"t": thread_id},
            "count",
        )

    def delete_runs(self, run_ids: Sequence[str]) -> Op[None]:
        yield BEGIN
        doomed = yield Q(
            "SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints"
            " WHERE run_id = ANY(%s::text[]) FOR UPDATE",
            (list(run_ids),),
        )
        yield from self._delete_checkpoints([tuple(row) for row in doomed])
        yield COMMIT

    def keep_latest(self, thread_ids: Sequence[str]) -> Op[None]:
        yield BEGIN
        for thread_id in thread_ids:
            namespaces = yield Q(
                "SELECT DISTINCT checkpoint_ns FROM checkpoints WHERE thread_id = %s",
                (thread_id,),
            )
            for (ns,) in namespaces:
                yield from self._keep_latest(thread_id, ns)
        yield COMMIT

    def _keep_latest(self, thread_id: str, ns: str) -> Op[None]:
        raw = yield from self.reader.newest((thread_id, ns))
        if raw is None:
            return
        newest = raw.row.checkpoint_id
        metadata = json.loads(raw.row.metadata)
        chains: dict[str, list[str]] = {}
        channels = delta_channels(metadata)
        if channels:
            stored = [encode_id(ch) for ch in channels]
            chains, _, _ = yield from self.reader.walk((thread_id, ns, newest), stored)
        keep = keep_latest_ids(newest, metadata, lambda _: chains)
        ids = yield Q(
            "SELECT checkpoint_id FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = %s",
            (thread_id, ns),
        )
        yield from self._delete_checkpoints(
            [(thread_id, ns, cid) for (cid,) in ids if cid not in keep]
        )

    def _delete_checkpoints(self, keys: Sequence[tuple[str, ...]]) -> Op[None]:
        """Delete these checkpoints with their writes, subtract them from their heads,
        then delete the values no remaining checkpoint of their namespaces uses —
        deciding that from the remaining rows, verified first."""
        by_namespace: dict[tuple[str, str], list[str]] = {}
        for t, ns, cid in keys:
            by_namespace.setdefault((t, ns), []).append(cid)
        for (t, ns), ids in by_namespace.items():
            deleted = yield Q(
                "WITH w AS (DELETE FROM writes WHERE thread_id = %(t)s AND checkpoint_ns = %(ns)s"
                " AND checkpoint_id = ANY(%(ids)s::text[])), d AS (DELETE FROM write_counts"
                " WHERE thread_id = %(t)s AND checkpoint_ns = %(ns)s"
                " AND checkpoint_id = ANY(%(ids)s::text[])) DELETE FROM checkpoints"
                " WHERE thread_id = %(t)s AND checkpoint_ns = %(ns)s"
                " AND checkpoint_id = ANY(%(ids)s::text[])",
                {"t": t, "ns": ns, "ids": ids},
                "count",
            )
            # Subtracted, not recounted: a row lost before stays missing from the count.
            yield Q(
                "WITH r AS (SELECT max(checkpoint_id) AS newest FROM checkpoints"
                " WHERE thread_id = %(t)s AND checkpoint_ns = %(ns)s),"
                " gone AS (DELETE FROM heads WHERE thread_id = %(t)s AND checkpoint_ns = %(ns)s"
                " AND (SELECT newest FROM r) IS NULL)"
                " UPDATE heads SET newest_id = (SELECT newest FROM r),"
                " checkpoint_count = checkpoint_count - %(n)s"
                " WHERE thread_id = %(t)s AND checkpoint_ns = %(ns)s"
                " AND (SELECT newest FROM r) IS NOT NULL",
                {"t": t, "ns": ns, "n": deleted},
                "count",
            )
            where = self.reader.where(t, ns)
            referenced = []
            for found in (yield Q(NAMESPACE_CHECKPOINTS, (t, ns))):
                row = CheckpointRow._make(found)
                check_checkpoint(row, self.reader.where(t, ns, row.checkpoint_id))
                referenced.append(dict(zip(row.channels, row.versions, strict=True)))
            stored = [check_value((t, ns), v, where) for v in (yield Q(NAMESPACE_VALUES, (t, ns)))]
            unused = unused_values(
                [(v.channel, v.version) for v in stored],
                referenced,
                bases={(v.channel, v.version): v.base for v in stored if v.base is not None},
            )
            if unused:
                yield Q(
                    "DELETE FROM blobs WHERE thread_id = %s AND checkpoint_ns = %s"
                    " AND (channel, version) IN (SELECT * FROM unnest(%s::text[], %s::text[]))",
                    (t, ns, [ch for ch, _ in unused], [v for _, v in unused]),
                    "count",
                )

    def copy_thread(self, source: str, target: str) -> Op[None]:
        """Copy every namespace of ``source`` in one transaction, each row checksummed
        anew for the target after the source's was verified; ThreadExistsError (nothing
        changed) if the target has checkpoints."""
        yield BEGIN
        yield Q("SELECT pg_advisory_xact_lock(hashtextextended(%s, 7))", (target,))
        if (yield Q("SELECT 1 FROM checkpoints WHERE thread_id = %s LIMIT 1", (target,), "one")):
            raise ThreadExistsError(
                f"cannot copy thread {decode_id(source)!r} into {decode_id(target)!r}: "
                f"{decode_id(target)!r} already has checkpoints; delete it first or choose "
                "a new thread id"
            )
        damage = yield from self.reader.scope_damage((source, None))
        if damage:
            raise damage[0]
        namespaces = yield Q(
            "SELECT checkpoint_ns FROM checkpoints WHERE thread_id = %(t)s UNION"
            " SELECT checkpoint_ns FROM blobs WHERE thread_id = %(t)s UNION"
            " SELECT checkpoint_ns FROM writes WHERE thread_id = %(t)s",
            {"t": source},
        )
        for (ns,) in namespaces:
            yield from self._copy_namespace((source, ns), target)
        yield Q(
            "INSERT INTO heads SELECT %s, checkpoint_ns, newest_id, checkpoint_count"
            " FROM heads WHERE thread_id = %s",
            (target, source),
            "count",
        )
        yield COMMIT

    def _copy_namespace(self, key: tuple[str, str], target: str) -> Op[None]:
        source, ns = key
        where = self.reader.where(*key)
        values = []
        for value in (yield Q(NAMESPACE_VALUES, key)):
            stored = check_value(key, value, where)
            values.append((target, ns, *value[:7], value_crc(target, ns, stored)))
        if values:
            yield Q(
                "INSERT INTO blobs (thread_id, checkpoint_ns, " + VALUE_COLUMNS + ")"  # noqa: S608
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                values,
                many=True,
            )
        writes: dict[str, list[Row]] = {}
        for write in (yield Q(NAMESPACE_WRITES, key)):
            writes.setdefault(write[0], []).append(tuple(write[1:]))
        checkpoints, counts = [], []
        for found in (yield Q(NAMESPACE_CHECKPOINTS, key)):
            row = CheckpointRow._make(found)
            at = self.reader.where(source, ns, row.checkpoint_id)
            check_checkpoint(row, at)
            moved: Key = (target, ns, row.checkpoint_id)
            crc = checkpoint_crc(
                moved,
                row.parent_id,
                row.run_id,
                (row.type, row.codec, row.checkpoint),
                row.channels,
                row.versions,
            )
            checkpoints.append(
                (
                    *moved,
                    *row[3:9],
                    jsonb_text(row.metadata),
                    *row[9:12],
                    crc,
                    metadata_crc(moved, row.metadata),
                )
            )
        for checkpoint_id, count, stored_sum in (yield Q(NAMESPACE_COUNTS, key)):
            own = writes.get(checkpoint_id, [])
            at = self.reader.where(source, ns, checkpoint_id)
            check_writes((source, ns, checkpoint_id), own, (count, stored_sum), at)
            total = sum(write_crc((target, ns, checkpoint_id), w) for w in own)
            counts.append((target, ns, checkpoint_id, len(own), total))
        rows = [
            (target, ns, cid, *w[:7], write_crc((target, ns, cid), w))
            for cid, ws in writes.items()
            for w in ws
        ]
        if rows:
            yield Q(
                "INSERT INTO writes (thread_id, checkpoint_ns, checkpoint_id, "  # noqa: S608
                + WRITE_COLUMNS
                + ")"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                rows,
                many=True,
            )
        if checkpoints:
            yield Q(
                "INSERT INTO checkpoints ("  # noqa: S608 - constant columns
                + ", ".join(CheckpointRow._fields[:9])
                + ", metadata_doc, "
                + ", ".join(CheckpointRow._fields[9:-2])
                + ")"
                " VALUES (" + ", ".join(["%s"] * 15) + ")",
                checkpoints,
                many=True,
            )
        if counts:
            yield Q("INSERT INTO write_counts VALUES (%s, %s, %s, %s, %s)", counts, many=True)


# -- verify ----------------------------------------------------------------------------


_NAMESPACES = (
    "SELECT thread_id, checkpoint_ns FROM checkpoints UNION SELECT thread_id, checkpoint_ns"
    " FROM blobs UNION SELECT thread_id, checkpoint_ns FROM writes UNION SELECT thread_id,"
    " checkpoint_ns FROM heads ORDER BY 1, 2"
)


def verify(
    db: Database, reader: Reader, serde: SerializerProtocol, *, repair: bool
) -> list[Damage]:
    """See the module docstring: every damage found (repaired or not), ``[]`` if none."""
    found: list[Damage] = []
    for t, ns in db.run(lambda: _namespaces()):
        try:
            found.extend(
                db.run(lambda: _namespace(reader, (t, ns), repair), write=repair)  # noqa: B023
            )
        except CorruptCheckpointError as exc:
            found.append(with_location(exc, reader.where(t, ns)).damage)
    return found


def _namespaces() -> Op[list[Row]]:
    found: list[Row] = yield Q(_NAMESPACES)
    return found


def _namespace(reader: Reader, key: tuple[str, str], repair: bool) -> Op[list[Damage]]:
    damage: list[Damage] = []
    yield BEGIN if repair else BEGIN_READ
    where = reader.where(*key)
    memo: dict[tuple[str, ...], bytes] = {}
    present: set[tuple[str, str]] = set()
    for value in (yield Q(NAMESPACE_VALUES, key)):
        present.add((value[0], value[1]))
        try:
            stored = check_value(key, value, where)
            if stored.type != EMPTY[0]:
                yield from reader.payload(key, stored, where, memo)
        except CorruptCheckpointError as exc:
            damage.append(exc.damage)
    checkpoints: dict[str, CheckpointRow] = {}
    for found in (yield Q(NAMESPACE_CHECKPOINTS, key)):
        row = CheckpointRow._make(found)
        at = reader.where(*key, row.checkpoint_id)
        try:
            check_checkpoint(row, at)
            stored_count = sum(
                pair in present for pair in zip(row.channels, row.versions, strict=True)
            )
            if stored_count < row.values_count:
                reason = (
                    f"{row.values_count} of the values it names were stored with it, "
                    f"{stored_count} are found"
                )
                raise corrupt(at, "value", key_path("blobs", *key), reason)
        except CorruptCheckpointError as exc:
            damage.append(exc.damage)
            continue
        checkpoints[row.checkpoint_id] = row
    writes, broken = _writes(reader, key, (yield Q(NAMESPACE_WRITES, key)), damage)
    wrong_digests = _digests(reader, key, checkpoints, writes, broken, damage, repair)
    heads = yield from reader.scope_damage(key)
    damage.extend(_repaired(e.damage, repair, "rebuilt from the checkpoints stored") for e in heads)
    if repair:
        yield from _repair(key, writes, wrong_digests, bool(heads))
    yield COMMIT
    return damage


def _writes(
    reader: Reader, key: tuple[str, str], found: list[Row], damage: list[Damage]
) -> tuple[dict[str, list[Row]], set[str]]:
    """The intact write rows by checkpoint, and the checkpoints with a damaged one."""
    writes: dict[str, list[Row]] = {}
    broken: set[str] = set()
    for write in found:
        checkpoint_id, rest = write[0], tuple(write[1:])
        try:
            check_writes((*key, checkpoint_id), [rest], None, reader.where(*key, checkpoint_id))
        except CorruptCheckpointError as exc:
            damage.append(exc.damage)
            broken.add(checkpoint_id)
            continue
        writes.setdefault(checkpoint_id, []).append(rest)
    return writes, broken


def _digests(  # noqa: PLR0913 - the pieces of one check, kept apart for readability
    reader: Reader,
    key: tuple[str, str],
    checkpoints: dict[str, CheckpointRow],
    writes: dict[str, list[Row]],
    broken: set[str],
    damage: list[Damage],
    repair: bool,
) -> list[str]:
    """The checkpoints whose writes do not match their digest (reported in ``damage``)."""
    wrong: list[str] = []
    for checkpoint_id, row in checkpoints.items():
        if checkpoint_id in broken:
            continue  # its damaged rows are reported already
        try:
            check_writes(
                (*key, checkpoint_id),
                writes.get(checkpoint_id, []),
                (row.writes_count, row.writes_sum),
                reader.where(*key, checkpoint_id),
            )
        except CorruptCheckpointError as exc:
            damage.append(_repaired(exc.damage, repair, "digest rebuilt from the write rows"))
            wrong.append(checkpoint_id)
    return wrong


def _repaired(damage: Damage, repair: bool, how: str) -> Damage:
    return replace(damage, reason=f"{damage.reason} [{how}]") if repair else damage


def _repair(
    key: tuple[str, str], writes: dict[str, list[Row]], wrong: list[str], heads: bool
) -> Op[None]:
    for checkpoint_id in wrong:
        rows = writes.get(checkpoint_id, [])
        total = sum(write_crc((*key, checkpoint_id), w) for w in rows)
        yield Q(
            "INSERT INTO write_counts VALUES (%s, %s, %s, %s, %s) ON CONFLICT (thread_id,"
            " checkpoint_ns, checkpoint_id) DO UPDATE SET writes_count = excluded.writes_count,"
            " writes_sum = excluded.writes_sum",
            (*key, checkpoint_id, len(rows), total),
            "count",
        )
    if heads:
        yield Q("DELETE FROM heads WHERE thread_id = %s AND checkpoint_ns = %s", key, "count")
        yield Q(
            "INSERT INTO heads SELECT thread_id, checkpoint_ns, max(checkpoint_id), count(*)"
            " FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = %s"
            " GROUP BY thread_id, checkpoint_ns",
            key,
            "count",
        )

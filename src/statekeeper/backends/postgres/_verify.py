"""``PostgresCheckpointer.verify()``: check every record, and repair what can be rebuilt.

Checked namespace by namespace, each in one snapshot: every ``blobs`` row against its row
checksum and every value's full payload rebuilt (down its delta chain) against its CRC;
every ``checkpoints`` row against its checksums, and that the values it names are stored
as often as when it was written; every ``writes`` row against its checksum, and each
checkpoint's writes against its digest; the namespace's head record against its rows.

``repair`` rebuilds, in one transaction per namespace, head records and writes digests
from the intact rows stored. Rows that fail their checksums are left as they are.
"""

from __future__ import annotations

from dataclasses import replace

from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper._storage.payload import EMPTY
from statekeeper.backends.postgres._database import BEGIN, BEGIN_READ, COMMIT, Database, Op, Q
from statekeeper.backends.postgres._integrity import (
    check_checkpoint,
    check_value,
    check_writes,
    corrupt,
    key_path,
    with_location,
    write_crc,
)
from statekeeper.backends.postgres._maintenance import (
    NAMESPACE_CHECKPOINTS,
    NAMESPACE_VALUES,
    NAMESPACE_WRITES,
)
from statekeeper.backends.postgres._reads import Reader
from statekeeper.backends.postgres._schema import CheckpointRow, Row
from statekeeper.errors import CorruptCheckpointError, Damage

__all__ = ["verify"]

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

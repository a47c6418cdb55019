"""What the SQLite checkpointer does to whole threads: delete, copy, prune, verify.

Each keeps the integrity records of :mod:`._integrity` true: deleting checkpoints
subtracts them from their namespace's head, and copying re-checksums every row for its
new thread (after verifying the source's, so damage is never blessed). Deletions and
prunes that decide what to remove from stored rows verify those rows first and change
nothing when one is damaged. :meth:`Maintenance.verify` is in :mod:`._verify`.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper._storage.deltas import StoredValue
from statekeeper._storage.lineage import keep_latest_ids, unused_values
from statekeeper.backends.sqlite._database import Database
from statekeeper.backends.sqlite._integrity import (
    Where,
    check_checkpoint,
    check_value,
    check_writes,
    checkpoint_crc,
    metadata_crc,
    text_keys,
    value_crc,
    write_crc,
)
from statekeeper.backends.sqlite._queries import (
    INSERT_CHECKPOINT_ROW,
    INSERT_VALUE_ROW,
    INSERT_WRITE,
    NAMESPACE_CHECKPOINTS,
    NAMESPACE_VALUES,
    NAMESPACE_WRITES,
    CheckpointRow,
    Row,
    Rows,
    metadata_index_sql,
)
from statekeeper.backends.sqlite._reads import Rules, newest, scope_damage, walk_ancestors
from statekeeper.backends.sqlite._verify import verify
from statekeeper.errors import Damage, ThreadExistsError

__all__ = ["Maintenance"]

_DELETE_CHECKPOINT = (
    "DELETE FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
)
_DELETE_WRITES = (
    "DELETE FROM writes WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
)


@dataclass(frozen=True)
class Maintenance:
    """The whole-thread operations of one checkpointer (its database, read rules and
    serde), each in its own transaction(s)."""

    db: Database
    rules: Rules
    serde: SerializerProtocol

    def delete_threads(self, thread_ids: Sequence[str]) -> None:
        """One transaction per thread, so a long list never holds the write lock long.
        Deletes every row of the thread, damaged or not."""
        for thread_id in thread_ids:
            with self.db.transaction(write=True) as conn:
                for table in ("checkpoints", "blobs", "writes", "heads"):
                    conn.execute(f"DELETE FROM {table} WHERE thread_id = ?", (thread_id,))  # noqa: S608

    def delete_runs(self, run_ids: Sequence[str]) -> None:
        with self.db.transaction(write=True) as conn:
            doomed = conn.execute(
                "SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints"
                " WHERE run_id IN (SELECT value FROM json_each(?))",
                (json.dumps(list(run_ids)),),
            ).fetchall()
            text_keys(doomed, self.rules.database, "checkpoints")
            self._delete_checkpoints(conn, doomed)

    def keep_latest(self, thread_ids: Sequence[str]) -> None:
        with self.db.transaction(write=True) as conn:
            for thread_id in thread_ids:
                namespaces = conn.execute(
                    "SELECT DISTINCT checkpoint_ns FROM checkpoints WHERE thread_id = ?",
                    (thread_id,),
                ).fetchall()
                for (ns,) in text_keys(namespaces, self.rules.database, "checkpoints"):
                    self._keep_latest(conn, thread_id, ns)

    def _keep_latest(self, conn: sqlite3.Connection, thread_id: str, ns: str) -> None:
        where = Where(self.rules.database, thread_id, ns)
        row = newest(conn, (thread_id, ns), self.rules, where)
        if row is None:
            return
        check_checkpoint(row, where, legacy=self.rules.legacy)
        key = (thread_id, ns, row.checkpoint_id)
        keep = keep_latest_ids(
            row.checkpoint_id,
            json.loads(row.metadata),
            lambda channels: walk_ancestors(conn, key, channels, self.rules)[0],
        )
        doomed = [
            (thread_id, ns, checkpoint_id)
            for (checkpoint_id,) in conn.execute(
                "SELECT checkpoint_id FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ?",
                (thread_id, ns),
            ).fetchall()
            if checkpoint_id not in keep
        ]
        self._delete_checkpoints(conn, text_keys(doomed, self.rules.database, "checkpoints"))

    def _delete_checkpoints(self, conn: sqlite3.Connection, keys: Sequence[Row]) -> None:
        """Delete these (thread, namespace, checkpoint id)s with their writes, subtract
        them from their heads, then delete the values no remaining checkpoint of their
        namespaces uses — deciding that from the remaining rows, verified first."""
        by_namespace: dict[tuple[str, str], list[Row]] = {}
        for key in keys:
            by_namespace.setdefault((key[0], key[1]), []).append(key)
        for (thread_id, ns), doomed in by_namespace.items():
            deleted = conn.executemany(_DELETE_CHECKPOINT, doomed).rowcount
            conn.executemany(_DELETE_WRITES, doomed)
            self._subtract_from_head(conn, (thread_id, ns), deleted)
            where = Where(self.rules.database, thread_id, ns)
            referenced = []
            for found in conn.execute(NAMESPACE_CHECKPOINTS, (thread_id, ns)):
                row = CheckpointRow._make(found)
                check_checkpoint(row, where, legacy=self.rules.legacy)
                referenced.append(json.loads(row.channel_versions))
            stored = [
                check_value((thread_id, ns), value, where, legacy=self.rules.legacy)
                for value in conn.execute(NAMESPACE_VALUES, (thread_id, ns))
            ]
            unused = unused_values(
                [(v.channel, v.version) for v in stored],
                referenced,
                bases={(v.channel, v.version): v.base for v in stored if v.base is not None},
            )
            conn.executemany(
                "DELETE FROM blobs WHERE thread_id = ? AND checkpoint_ns = ? AND channel = ?"
                " AND version = ?",
                [(thread_id, ns, ch, v) for ch, v in unused],
            )

    def _subtract_from_head(
        self, conn: sqlite3.Connection, key: tuple[str, str], deleted: int
    ) -> None:
        # Subtracted, not recounted: a row lost before stays missing from the count.
        (remaining,) = conn.execute(
            "SELECT MAX(checkpoint_id) FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ?",
            key,
        ).fetchone()
        if remaining is None:
            conn.execute("DELETE FROM heads WHERE thread_id = ? AND checkpoint_ns = ?", key)
        else:
            conn.execute(
                "UPDATE heads SET newest_id = ?, checkpoint_count = checkpoint_count - ?"
                " WHERE thread_id = ? AND checkpoint_ns = ?",
                (remaining, deleted, *key),
            )

    def copy_thread(self, source: str, target: str) -> None:
        """Copy the whole parent chain (all namespaces), values and writes in one
        transaction, each row checksummed anew for the target after the source's was
        verified; ThreadExistsError (nothing changed) if the target has checkpoints,
        CorruptCheckpointError (nothing changed) if a source row is damaged."""
        with self.db.transaction(write=True) as conn:
            if conn.execute(
                "SELECT 1 FROM checkpoints WHERE thread_id = ? LIMIT 1", (target,)
            ).fetchone():
                raise ThreadExistsError(
                    f"cannot copy thread {source!r} into {target!r}: {target!r} already has "
                    "checkpoints; delete it first or choose a new thread id"
                )
            damage = scope_damage(conn, (source, None), self.rules)
            if damage:
                raise damage[0]
            namespaces = conn.execute(
                "SELECT checkpoint_ns FROM checkpoints WHERE thread_id = ?1 UNION"
                " SELECT checkpoint_ns FROM blobs WHERE thread_id = ?1 UNION"
                " SELECT checkpoint_ns FROM writes WHERE thread_id = ?1",
                (source,),
            ).fetchall()
            for (ns,) in text_keys(namespaces, self.rules.database, "checkpoints"):
                self._copy_namespace(conn, (source, ns), target)
            conn.execute(
                "INSERT INTO heads SELECT ?, checkpoint_ns, newest_id, checkpoint_count"
                " FROM heads WHERE thread_id = ?",
                (target, source),
            )

    def _copy_namespace(self, conn: sqlite3.Connection, key: tuple[str, str], target: str) -> None:
        thread_id, ns = key
        legacy = self.rules.legacy
        where = Where(self.rules.database, thread_id, ns)
        for value in conn.execute(NAMESPACE_VALUES, key).fetchall():
            stored = check_value(key, value, where, legacy=legacy)
            row_crc = None if value[7] is None else value_crc(target, ns, stored)
            conn.execute(INSERT_VALUE_ROW, (target, ns, *_fields(stored), row_crc))
        writes: dict[str, Rows] = {}
        for write in conn.execute(NAMESPACE_WRITES, key).fetchall():
            writes.setdefault(write[2], []).append(write)
        for found in conn.execute(NAMESPACE_CHECKPOINTS, key).fetchall():
            row = CheckpointRow._make(found)
            at = Where(self.rules.database, thread_id, ns, row.checkpoint_id)
            check_checkpoint(row, at, legacy=legacy)
            own = writes.pop(row.checkpoint_id, [])
            check_writes(
                (thread_id, ns, row.checkpoint_id),
                own,
                (row.writes_count, row.writes_sum),
                at,
                legacy=legacy,
            )
            copied_sum = self._copy_writes(conn, own, target)
            moved = _moved(row, target, None if row.writes_count is None else copied_sum)
            conn.execute(INSERT_CHECKPOINT_ROW, moved)
        for rows in writes.values():  # writes of checkpoints that are not stored
            self._copy_writes(conn, rows, target)

    def _copy_writes(self, conn: sqlite3.Connection, rows: Rows, target: str) -> int:
        """Insert write rows under ``target``, checksummed anew (those without a checksum
        stay without); return the sum of the new checksums."""
        total = 0
        for write in rows:
            moved = (target, *write[1:10])
            crc = None if write[10] is None else write_crc(moved)
            total += crc or 0
            conn.execute(f"INSERT {INSERT_WRITE}", (*moved, crc))
        return total

    def index_metadata(self, keys: Sequence[str]) -> None:
        """Create the index of each of these metadata keys (checked) it lacks."""
        with self.db.transaction(write=True) as conn:
            for key in keys:
                conn.execute(metadata_index_sql(key))

    def verify(self, *, repair: bool) -> list[Damage]:
        """See :mod:`._verify`."""
        return verify(self.db, self.rules, self.serde, repair=repair)


def _fields(value: StoredValue) -> tuple[object, ...]:
    return (
        value.channel,
        value.version,
        value.type,
        value.codec,
        value.data,
        value.base,
        value.crc,
    )


def _moved(row: CheckpointRow, target: str, writes_sum: int | None) -> tuple[object, ...]:
    """A verified checkpoint row as stored under thread ``target``, checksummed anew
    (a row stored without checksums stays without)."""
    key = (target, row.checkpoint_ns, row.checkpoint_id)
    crc = metadata = None
    if row.crc is not None:
        payload = (row.type, row.codec, row.checkpoint)
        crc = checkpoint_crc(
            key, row.parent_id, row.run_id, payload, row.channel_versions, row.values_count
        )
        metadata = metadata_crc(key, row.metadata)
    return (*key, *row[3:11], crc, metadata, row.writes_count, writes_sum)

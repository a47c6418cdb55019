"""``SqliteCheckpointer.verify()``: check every record, and repair what can be rebuilt.

Checked, namespace by namespace (each in one read snapshot), after SQLite's own
``PRAGMA integrity_check`` (which also finds index entries that do not match their
rows, which reads go through):

* every ``blobs`` row against its row checksum, and every value's full payload rebuilt
  (down its delta chain) against its CRC;
* every ``checkpoints`` row against its checksums, and that the values it names are
  stored as often as when it was written; a row without checksums (written before they
  existed) is checked for shape and decoded, and reported as unverified;
* every ``writes`` row against its checksum, and each checkpoint's writes against its
  digest of them;
* the namespace's head record against its rows.

``repair`` (in one write transaction per namespace) checksums rows written before
checksums existed when they pass those checks, and rebuilds head records and writes
digests from the rows stored. Rows that fail their checksums are left as they are:
nothing is deleted or rewritten but the checksums and the digests.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field, replace
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper._storage.deltas import crc
from statekeeper._storage.payload import EMPTY, decode
from statekeeper._storage.remembered import RecentPayloads
from statekeeper.backends.sqlite._database import Database
from statekeeper.backends.sqlite._integrity import (
    Where,
    check_checkpoint,
    check_value,
    check_writes,
    checkpoint_crc,
    corrupt,
    is_text,
    key_path,
    metadata_crc,
    value_crc,
    with_location,
    write_crc,
)
from statekeeper.backends.sqlite._queries import (
    NAMESPACE_CHECKPOINTS,
    NAMESPACE_VALUES,
    NAMESPACE_WRITES,
    CheckpointRow,
    Row,
    Rows,
)
from statekeeper.backends.sqlite._reads import Rules, scope_damage
from statekeeper.backends.sqlite._values import ValueReader
from statekeeper.errors import CorruptCheckpointError, Damage, StatekeeperError

__all__ = ["verify"]

_NAMESPACES = (
    "SELECT thread_id, checkpoint_ns FROM checkpoints UNION SELECT thread_id, checkpoint_ns"
    " FROM blobs UNION SELECT thread_id, checkpoint_ns FROM writes"
)
_NAMESPACES_AND_HEADS = (
    "SELECT thread_id, checkpoint_ns FROM checkpoints UNION SELECT thread_id, checkpoint_ns"
    " FROM blobs UNION SELECT thread_id, checkpoint_ns FROM writes UNION SELECT thread_id,"
    " checkpoint_ns FROM heads"
)


def verify(db: Database, rules: Rules, serde: SerializerProtocol, *, repair: bool) -> list[Damage]:
    """See the module docstring: every damage found (repaired or not), ``[]`` if none."""
    found = _integrity_check(db)
    try:
        with db.transaction(write=False) as conn:
            sql = _NAMESPACES_AND_HEADS if rules.heads else _NAMESPACES
            namespaces = conn.execute(sql).fetchall()
    except CorruptCheckpointError as exc:
        return [*found, exc.damage]
    unverified = 0
    for key in namespaces:
        if not all(is_text(part) for part in key):
            where = _where(rules.database, key)
            reason = "rows are stored under a thread id or namespace that is not valid text"
            found.append(corrupt(where, "index", key_path("checkpoints", *key), reason).damage)
            continue
        try:
            with db.transaction(write=repair) as conn:
                check = _Namespace(conn, key, rules, serde, repairing=repair)
                check.run()
                if repair:
                    check.repair()
            found.extend(check.damage)
            unverified += check.unverified
        except CorruptCheckpointError as exc:
            found.append(with_location(exc, _where(rules.database, key)).damage)
    if repair and rules.legacy and rules.heads and unverified == 0:
        with db.transaction(write=True) as conn:
            conn.execute("UPDATE checkpoint_integrity SET value = 0 WHERE name = 'legacy_rows'")
    return found


def _integrity_check(db: Database) -> list[Damage]:
    """SQLite's own check of its pages, tables and indexes."""
    try:
        with db.transaction(write=False) as conn:
            lines = [line for (line,) in conn.execute("PRAGMA integrity_check")]
    except CorruptCheckpointError as exc:
        return [exc.damage]
    return [
        Damage(f"SQLite integrity_check: {line}", backend="sqlite", record="index", path=db.path)
        for line in lines
        if line != "ok"
    ]


def _where(database: str, key: tuple[Any, ...], checkpoint_id: Any = None) -> Where:
    ids = [part if is_text(part) else None for part in (*key, checkpoint_id)]
    return Where(database, *ids)


@dataclass
class _Namespace:
    """The checks of one namespace (thread id, namespace) in one transaction, what they
    found, and what ``repair`` may rebuild."""

    conn: sqlite3.Connection
    key: tuple[Any, Any]
    rules: Rules
    serde: SerializerProtocol
    repairing: bool = False
    damage: list[Damage] = field(default_factory=list)
    unverified: int = 0  # rows without checksums left after this check (and repair)
    present: set[tuple[Any, Any]] = field(default_factory=set)
    checkpoints: dict[Any, CheckpointRow] = field(default_factory=dict)  # intact
    legacy_values: list[Row] = field(default_factory=list)  # intact, without checksums
    writes: dict[Any, Rows] = field(default_factory=dict)  # intact rows, by checkpoint
    broken_writes: set[Any] = field(default_factory=set)  # checkpoints with a damaged row
    wrong_digests: set[Any] = field(default_factory=set)
    reader: ValueReader | None = None

    def run(self) -> None:
        self.reader = ValueReader(self.conn, RecentPayloads(0), legacy=self.rules.legacy)
        for value in self.conn.execute(NAMESPACE_VALUES, self.key).fetchall():
            self._value(value)
        for found in self.conn.execute(NAMESPACE_CHECKPOINTS, self.key).fetchall():
            self._checkpoint(CheckpointRow._make(found))
        for write in self.conn.execute(NAMESPACE_WRITES, self.key).fetchall():
            self._write(write)
        for checkpoint_id, row in self.checkpoints.items():
            self._digest(checkpoint_id, row)
        for error in scope_damage(self.conn, self.key, self.rules):
            self._add(error, "rebuilt from the checkpoints stored")
        self._report_unverified()

    def _add(self, error: StatekeeperError, repaired: str | None = None) -> None:
        damage = (
            error.damage
            if isinstance(error, CorruptCheckpointError)
            else Damage(str(error), backend="sqlite", record="checkpoint")
        )
        self.damage.append(
            damage if repaired is None else replace(damage, reason=damage.reason + f" [{repaired}]")
        )

    def _value(self, value: Row) -> None:
        where = _where(self.rules.database, self.key)
        self.present.add((value[0], value[1]))
        try:
            stored = check_value(self.key, value, where, legacy=self.rules.legacy)
            if stored.type != EMPTY[0]:
                assert self.reader is not None
                self.reader.read(self.key, value, where)
        except CorruptCheckpointError as exc:
            self._add(exc)
            return
        if value[7] is None:
            self.legacy_values.append(value)

    def _checkpoint(self, row: CheckpointRow) -> None:
        where = _where(self.rules.database, self.key, row.checkpoint_id)
        try:
            check_checkpoint(row, where, legacy=self.rules.legacy)
            versions = json.loads(row.channel_versions)
            stored = sum((ch, version) in self.present for ch, version in versions.items())
            if row.values_count is not None and stored < row.values_count:
                raise corrupt(
                    where,
                    "value",
                    key_path("blobs", *self.key),
                    f"{row.values_count} of the values it names were stored with it, "
                    f"{stored} are found",
                )
            if row.crc is None:
                decoded = decode(self.serde, row.type, row.codec, row.checkpoint)
                if not isinstance(decoded, dict) or decoded.get("id") != row.checkpoint_id:
                    path = key_path("checkpoints", *self.key, row.checkpoint_id)
                    raise corrupt(
                        where, "checkpoint", path, "it does not decode to this checkpoint"
                    )
        except StatekeeperError as exc:
            self._add(exc)
            return
        self.checkpoints[row.checkpoint_id] = row

    def _write(self, write: Row) -> None:
        checkpoint_id = write[2]
        where = _where(self.rules.database, self.key, checkpoint_id)
        try:
            check_writes(tuple(write[:3]), [write], None, where, legacy=self.rules.legacy)
            if write[10] is None:
                decode(self.serde, write[7], write[8], write[9])
        except StatekeeperError as exc:
            self._add(exc)
            self.broken_writes.add(checkpoint_id)
            return
        self.writes.setdefault(checkpoint_id, []).append(write)

    def _digest(self, checkpoint_id: Any, row: CheckpointRow) -> None:
        if checkpoint_id in self.broken_writes:
            return  # its damaged rows are reported already
        rows = self.writes.get(checkpoint_id, [])
        where = _where(self.rules.database, self.key, checkpoint_id)
        digest = (row.writes_count, row.writes_sum)
        try:
            check_writes((*self.key, checkpoint_id), rows, digest, where, legacy=self.rules.legacy)
        except CorruptCheckpointError as exc:
            self._add(exc, "digest rebuilt from the write rows stored")
            self.wrong_digests.add(checkpoint_id)

    def _report_unverified(self) -> None:
        legacy = {
            ("checkpoint", "checkpoints"): sum(r.crc is None for r in self.checkpoints.values()),
            ("value", "blobs"): len(self.legacy_values),
            ("writes", "writes"): sum(w[10] is None for ws in self.writes.values() for w in ws),
        }
        where = _where(self.rules.database, self.key)
        for (record, table), count in legacy.items():
            if count:
                self.unverified += count
                reason = (
                    f"{count} {table} rows were written before checksums existed and are "
                    "unverified; verify(repair=True) checksums them"
                )
                if self.repairing:
                    reason += " [checksummed now]"
                self.damage.append(
                    corrupt(where, record, key_path(table, *self.key), reason).damage
                )

    # -- repair --------------------------------------------------------------------------

    def repair(self) -> None:
        """Checksum the intact rows without checksums, rebuild digests and the head."""
        thread_id, ns = self.key
        for value in self.legacy_values:
            self._checksum_value(value)
        for rows in self.writes.values():
            for write in rows:
                if write[10] is None:
                    self.conn.execute(
                        "UPDATE writes SET crc = ? WHERE thread_id = ? AND checkpoint_ns = ?"
                        " AND checkpoint_id = ? AND task_id = ? AND idx = ?",
                        (write_crc(write[:10]), *write[:5]),
                    )
        for checkpoint_id, row in self.checkpoints.items():
            if row.crc is None:
                self._checksum_checkpoint(row)
            if checkpoint_id not in self.broken_writes and (
                row.writes_count is None or checkpoint_id in self.wrong_digests
            ):
                rows = self.writes.get(checkpoint_id, [])
                self.conn.execute(
                    "UPDATE checkpoints SET writes_count = ?, writes_sum = ? WHERE"
                    " thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?",
                    (len(rows), sum(write_crc(w[:10]) for w in rows), *self.key, checkpoint_id),
                )
        self.conn.execute("DELETE FROM heads WHERE thread_id = ? AND checkpoint_ns = ?", self.key)
        self.conn.execute(
            "INSERT INTO heads SELECT thread_id, checkpoint_ns, MAX(checkpoint_id), COUNT(*)"
            " FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ?"
            " GROUP BY thread_id, checkpoint_ns",
            (thread_id, ns),
        )
        self.unverified -= (
            len(self.legacy_values)
            + sum(r.crc is None for r in self.checkpoints.values())
            + sum(w[10] is None for ws in self.writes.values() for w in ws)
        )

    def _checksum_value(self, value: Row) -> None:
        assert self.reader is not None
        stored = check_value(self.key, value, Where(self.rules.database), legacy=True)
        payload_crc = stored.crc
        if payload_crc is None and stored.type != EMPTY[0]:
            payload_crc = crc(self.reader.memo[(*self.key, stored.channel, stored.version)])
        stored = replace(stored, crc=payload_crc)
        self.conn.execute(
            "UPDATE blobs SET crc = ?, row_crc = ? WHERE thread_id = ? AND checkpoint_ns = ?"
            " AND channel = ? AND version = ?",
            (payload_crc, value_crc(*self.key, stored), *self.key, stored.channel, stored.version),
        )

    def _checksum_checkpoint(self, row: CheckpointRow) -> None:
        key = (row.thread_id, row.checkpoint_ns, row.checkpoint_id)
        versions = json.loads(row.channel_versions)
        present = sum((ch, version) in self.present for ch, version in versions.items())
        payload = (row.type, row.codec, row.checkpoint)
        self.conn.execute(
            "UPDATE checkpoints SET values_count = ?, crc = ?, metadata_crc = ? WHERE"
            " thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?",
            (
                present,
                checkpoint_crc(
                    key, row.parent_id, row.run_id, payload, row.channel_versions, present
                ),
                metadata_crc(key, row.metadata),
                *key,
            ),
        )

"""How the SQLite checkpointer reads and writes channel values (the ``blobs`` table).

A value is stored whole, compressed, or as an append delta on an earlier version of the
same channel (see :mod:`statekeeper._storage.deltas`). Reading follows a delta's
chain down to a full copy, verifying each row's checksum and the rebuilt payload's CRC;
writing re-checks, inside the write transaction, that a delta's base still holds what the
writer remembers, and stores the full copy otherwise.
"""

from __future__ import annotations

import sqlite3

from statekeeper._storage.deltas import PlannedValue, StoredValue, rebuild_all
from statekeeper._storage.remembered import MAX_CHAIN, RecentPayloads
from statekeeper.backends.sqlite._integrity import (
    Where,
    check_key,
    check_value,
    corrupt,
    key_path,
    value_crc,
)
from statekeeper.backends.sqlite._queries import (
    INSERT_VALUE,
    REPLACE_VALUE,
    SELECT_CRC,
    SELECT_VALUE,
    VALUE_COLUMNS,
    Row,
)
from statekeeper.errors import SerializationError

__all__ = ["Memo", "ValueReader", "write_value"]

Memo = dict[tuple[str, ...], bytes]


class ValueReader:
    """Reads full payloads of one namespace's values in one transaction.

    ``memo`` keeps every payload rebuilt (older checkpoints of a listing share them);
    ``recent`` is the checkpointer's memory of the payloads it wrote; ``legacy`` whether
    rows without a checksum are read unverified (see :mod:`._integrity`).
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        recent: RecentPayloads,
        memo: Memo | None = None,
        *,
        legacy: bool,
    ) -> None:
        self.conn = conn
        self.recent = recent
        self.memo: Memo = {} if memo is None else memo
        self.legacy = legacy

    def read(self, key: tuple[str, str], row: Row, where: Where) -> bytes:
        """The full payload of a ``blobs`` row (:data:`VALUE_COLUMNS`) of namespace
        ``key``, following its append-delta chain.

        Raises:
            CorruptCheckpointError: a row of the chain or the rebuilt payload is damaged
                (record ``"value"`` or ``"delta"``), or a base is missing.
        """
        thread_id, ns = key
        memo_key = (thread_id, ns, row[0], row[1])
        if memo_key in self.memo:  # this row was verified and rebuilt in this transaction
            return self.memo[memo_key]
        wanted = check_value(key, row, where, legacy=self.legacy)
        remembered = self.recent.get((thread_id, ns, wanted.channel))
        # The newest version this process wrote, if the row still holds what it wrote.
        if remembered is not None and (remembered.version, remembered.crc) == (
            wanted.version,
            wanted.crc,
        ):
            self.memo[memo_key] = remembered.data
            return remembered.data
        chain, below = self._chain(key, wanted, where)
        try:
            rebuilt = rebuild_all(chain, below)
        except SerializationError as exc:
            path = key_path("blobs", thread_id, ns, wanted.channel, wanted.version)
            record = "value" if len(chain) == 1 and below is None else "delta"
            raise corrupt(where, record, path, str(exc).split(";")[0]) from exc
        # Keep every payload rebuilt on the way: older checkpoints of a listing need them.
        for link, data in zip(chain, rebuilt, strict=True):
            self.memo[(thread_id, ns, link.channel, link.version)] = data
        return self.memo[memo_key]

    def check_empty(self, key: tuple[str, str], row: Row, where: Where) -> None:
        """Verify the row of a version without a value (the ``empty`` marker)."""
        memo_key = (*key, row[0], row[1])
        if memo_key not in self.memo:
            check_value(key, row, where, legacy=self.legacy)
            self.memo[memo_key] = b""

    def _chain(
        self, key: tuple[str, str], wanted: StoredValue, where: Where
    ) -> tuple[list[StoredValue], bytes | None]:
        """``wanted``'s delta chain, nearest base first, down to a full copy or to a
        version already rebuilt (returned as the payload below the chain)."""
        thread_id, ns = key
        chain = [wanted]
        while chain[-1].base is not None:
            below = self.memo.get((thread_id, ns, wanted.channel, chain[-1].base))
            if below is not None:
                return chain, below
            base = None
            if len(chain) <= MAX_CHAIN:
                base = self.conn.execute(
                    SELECT_VALUE, (thread_id, ns, wanted.channel, chain[-1].base)
                ).fetchone()
            if base is None:
                reason = (
                    "its chain of deltas is longer than any written"
                    if len(chain) > MAX_CHAIN
                    else f"the value at version {chain[-1].version} is a delta on this "
                    "version, which is missing"
                )
                path = key_path("blobs", thread_id, ns, wanted.channel, chain[-1].base)
                raise corrupt(where, "delta", path, reason)
            check_key(tuple(base[:2]), (wanted.channel, chain[-1].base), where, "blobs")
            chain.append(check_value(key, base, where, legacy=self.legacy))
        return chain, None


def write_value(
    conn: sqlite3.Connection, thread_id: str, ns: str, plan: PlannedValue, recent: RecentPayloads
) -> bool:
    """Write one planned value; return True if its full copy replaced a delta whose
    base changed since it was planned (another process deleted or rewrote it)."""
    value = plan.stored
    use_fallback = False
    if value.base is not None:
        base = conn.execute(SELECT_CRC, (thread_id, ns, value.channel, value.base)).fetchone()
        use_fallback = base is None or base[0] != plan.base_crc
    if use_fallback:
        assert plan.fallback is not None
        value = plan.fallback
    row = (
        thread_id,
        ns,
        value.channel,
        value.version,
        value.type,
        value.codec,
        value.data,
        value.base,
        value.crc,
        value_crc(thread_id, ns, value),
    )
    if conn.execute(INSERT_VALUE, row).rowcount == 0:
        # The version is already stored: an overwrite, which LangGraph itself never does.
        existing = conn.execute(
            SELECT_CRC, (thread_id, ns, value.channel, value.version)
        ).fetchone()
        if existing[0] != value.crc:
            _detach_dependents(conn, (thread_id, ns), value.channel, value.version, recent)
        conn.execute(REPLACE_VALUE, row)
    return use_fallback


def _detach_dependents(
    conn: sqlite3.Connection,
    key: tuple[str, str],
    channel: str,
    version: str,
    recent: RecentPayloads,
) -> None:
    """Before a stored version is overwritten with other content, store the deltas
    built on it as full copies, so they keep their values (read, so verified, first)."""
    thread_id, ns = key
    dependents = conn.execute(
        f"SELECT {VALUE_COLUMNS} FROM blobs"  # noqa: S608 - constant columns
        " WHERE thread_id = ? AND checkpoint_ns = ? AND channel = ? AND base_version = ?",
        (thread_id, ns, channel, version),
    ).fetchall()
    reader = ValueReader(conn, recent, legacy=True)
    for row in dependents:
        data = reader.read(key, row, Where("", thread_id, ns))
        full = StoredValue(channel, row[1], row[2], "", data, None, row[6])
        conn.execute(
            "UPDATE blobs SET codec = '', blob = ?, base_version = NULL, row_crc = ?"
            " WHERE thread_id = ? AND checkpoint_ns = ? AND channel = ? AND version = ?",
            (data, value_crc(thread_id, ns, full), thread_id, ns, channel, row[1]),
        )
    recent.discard((thread_id, ns, channel))

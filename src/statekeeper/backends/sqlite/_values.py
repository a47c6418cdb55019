"""How the SQLite checkpointer reads and writes channel values (the ``blobs`` table).

A value is stored whole, compressed, or as an append delta on an earlier version of the
same channel (see :mod:`statekeeper._storage.deltas`). Reading follows a delta's
chain down to a full copy; writing re-checks, inside the write transaction, that a delta's
base still holds what the writer remembers, and stores the full copy otherwise.
"""

from __future__ import annotations

import sqlite3

from statekeeper._storage.deltas import (
    PlannedValue,
    RecentPayloads,
    StoredValue,
    rebuild_all,
)
from statekeeper.backends.sqlite._queries import (
    INSERT_VALUE,
    REPLACE_VALUE,
    SELECT_CRC,
    SELECT_VALUE,
    Row,
)
from statekeeper.errors import SerializationError

__all__ = ["read_value", "write_value"]


def read_value(
    conn: sqlite3.Connection,
    thread_id: str,
    ns: str,
    row: Row,
    memo: dict[tuple[str, ...], bytes],
    recent: RecentPayloads,
) -> bytes:
    """The full payload of a ``blobs`` row, following its append-delta chain."""
    wanted = StoredValue(*row)
    key = (thread_id, ns, wanted.channel, wanted.version)
    if key in memo:
        return memo[key]
    remembered = recent.get((thread_id, ns, wanted.channel))
    # The newest version this process wrote, if the row still holds what it wrote.
    if remembered is not None and (remembered.version, remembered.crc) == (
        wanted.version,
        wanted.crc,
    ):
        memo[key] = remembered.data
        return remembered.data
    chain = [wanted]
    below = None  # the full payload under the chain, when a caller already rebuilt it
    while chain[-1].base is not None:
        below = memo.get((thread_id, ns, wanted.channel, chain[-1].base))
        if below is not None:
            break
        base = conn.execute(
            SELECT_VALUE, (thread_id, ns, wanted.channel, chain[-1].base)
        ).fetchone()
        if base is None:
            raise SerializationError(
                f"the stored value of channel {wanted.channel!r} at version "
                f"{chain[-1].version} lost its base version {chain[-1].base}; the "
                "database is corrupt: restore it from a backup"
            )
        chain.append(StoredValue(*base))
    # Keep every payload rebuilt on the way: older checkpoints of a listing need them.
    for link, data in zip(chain, rebuild_all(chain, below), strict=True):
        memo[(thread_id, ns, link.channel, link.version)] = data
    return memo[key]


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
    )
    if conn.execute(INSERT_VALUE, row).rowcount == 0:
        # The version is already stored: an overwrite, which LangGraph itself never does.
        existing = conn.execute(
            SELECT_CRC, (thread_id, ns, value.channel, value.version)
        ).fetchone()
        if existing[0] != value.crc:
            _detach_dependents(conn, thread_id, ns, value.channel, value.version, recent)
        conn.execute(REPLACE_VALUE, row)
    return use_fallback


def _detach_dependents(
    conn: sqlite3.Connection,
    thread_id: str,
    ns: str,
    channel: str,
    version: str,
    recent: RecentPayloads,
) -> None:
    """Before a stored version is overwritten with other content, store the deltas
    built on it as full copies, so they keep their values."""
    dependents = conn.execute(
        "SELECT channel, version, type, codec, blob, base_version, crc FROM blobs"
        " WHERE thread_id = ? AND checkpoint_ns = ? AND channel = ? AND base_version = ?",
        (thread_id, ns, channel, version),
    ).fetchall()
    for row in dependents:
        data = read_value(conn, thread_id, ns, row, {}, recent)
        conn.execute(
            "UPDATE blobs SET codec = '', blob = ?, base_version = NULL WHERE thread_id = ?"
            " AND checkpoint_ns = ? AND channel = ? AND version = ?",
            (data, thread_id, ns, channel, row[1]),
        )
    recent.discard((thread_id, ns, channel))

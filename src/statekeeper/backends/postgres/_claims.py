"""Thread claims on PostgreSQL: a session advisory lock per thread.

A claim is ``pg_try_advisory_lock`` on a key derived from the schema and the thread id,
taken on a connection of its own that the claim keeps open for its duration. The server
releases the lock when that session ends, however its holder dies (a killed process
closes its socket), so a dead run never leaves its thread claimed. The ``claims`` table
describes the holder (pid, host, since) for messages; whether a claim is held is read
from ``pg_locks``, never from that table, so a row left by a dead holder means nothing.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import psycopg

from statekeeper._storage.claims import busy_error, holder_info
from statekeeper.backends.postgres import encode_id
from statekeeper.backends.postgres._database import Database, lock_key
from statekeeper.backends.postgres._running import Op, Q

__all__ = ["Claims"]

# Who holds an advisory lock (a bigint key shows in pg_locks as classid, objid, 1).
_HOLDER = (
    "SELECT l.pid, c.holder FROM pg_locks l LEFT JOIN claims c ON c.thread_id = %s"
    " WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1"
    " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    " AND l.classid = %s::bigint::oid AND l.objid = %s::bigint::oid"
)


class Claims:
    """The claims of one checkpointer's schema."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def _key(self, stored: str) -> int:
        return lock_key("statekeeper-claim", self.db.schema, stored)

    @contextlib.contextmanager
    def claim(self, thread_id: str) -> Iterator[None]:
        """Hold the claim on ``thread_id`` for the ``with`` block; ThreadBusyError if held."""
        stored = encode_id(thread_id)
        key = self._key(stored)
        conn = self.db.connect()
        taken = False
        try:
            try:
                (taken,) = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()  # type: ignore[misc]
                if not taken:
                    holder = _describe(conn.execute(_HOLDER, (stored, *_split(key))).fetchone())
                    raise busy_error(thread_id, holder or {})
                info = dict(holder_info(), thread_id=thread_id, backend_pid=conn.info.backend_pid)
                conn.execute(
                    "INSERT INTO claims VALUES (%s, %s) ON CONFLICT (thread_id)"
                    " DO UPDATE SET holder = excluded.holder",
                    (stored, json.dumps(info)),
                )
            except psycopg.Error as exc:
                raise self.db.error(exc, True) from exc
            yield
        finally:
            with contextlib.suppress(psycopg.Error):
                if taken and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                    conn.execute("DELETE FROM claims WHERE thread_id = %s", (stored,))
                    # released before close returns: a session's end is noticed by the
                    # server a moment later, and a claim just given up must look free
                    conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
            conn.close()  # ends the session: the server releases the lock if still held

    def holder(self, thread_id: str) -> dict[str, Any] | None:
        """Who holds the claim (``None``: nobody), read without taking it."""
        stored = encode_id(thread_id)
        found = self.db.run(lambda: _holder_op(stored, self._key(stored)))
        described = _describe(found)
        return None if described is None else dict(described, thread_id=thread_id)


def _holder_op(stored: str, key: int) -> Op[Any]:
    return (yield Q(_HOLDER, (stored, *_split(key)), "one"))


def _split(key: int) -> tuple[int, int]:
    unsigned = key & 0xFFFFFFFFFFFFFFFF
    return unsigned >> 32, unsigned & 0xFFFFFFFF


def _describe(found: Any) -> dict[str, Any] | None:
    if found is None:
        return None
    pid, text = found
    try:
        info = json.loads(text) if text else {}
    except ValueError:
        info = {}
    if not isinstance(info, dict) or info.get("backend_pid") != pid:
        info = {}  # a row left by an earlier holder: only the server's pid is known
    return {"backend_pid": pid, **info}

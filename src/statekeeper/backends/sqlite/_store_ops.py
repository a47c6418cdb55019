"""The SQLite memory store's operations, each run on a connection inside a transaction that
:class:`statekeeper.memory.store.SqliteStore` opened (search is in ``_sqlite_store_search``).

Times are Unix seconds (``now``), read once per batch (see ``_store_base``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from langgraph.store.base import GetOp, Item, ListNamespacesOp, SearchItem

from statekeeper.backends.sqlite._store_schema import (
    DELETE_ITEM,
    DELETE_TERMS,
    DELETE_VECTORS,
    EXPIRED_IDS,
    INSERT_TERMS,
    INSERT_VECTOR,
    LIST_NAMESPACES,
    REFRESH_TTL,
    SELECT_ID,
    SELECT_ITEM,
    UPSERT_ITEM,
    fts_terms,
    namespace_text,
    scope,
)
from statekeeper.memory.store.base import Write, stamp
from statekeeper.memory.store.search import literal_prefix, select_namespaces
from statekeeper.memory.store.values import decode_value

__all__ = [
    "get",
    "list_namespaces",
    "refresh_ttl",
    "search_item",
    "sweep",
    "write",
]

# A row of ITEM_COLUMNS: id, namespace, key, value, created_at, updated_at, ttl_minutes.
Row = tuple[Any, ...]


def write(conn: sqlite3.Connection, op: Write, now: float) -> None:
    """Put or delete one item with its terms and vectors. A put keeps the item's id and
    ``created_at`` when the key exists and sets ``updated_at`` to ``now``."""
    namespace = namespace_text(op.namespace)
    row = conn.execute(SELECT_ID, (namespace, op.key)).fetchone()
    if op.value is None:
        if row is not None:
            _remove(conn, row[0])
        return
    expires_at = None if op.ttl is None else now + op.ttl * 60.0
    cursor = conn.execute(
        UPSERT_ITEM, (namespace, op.key, op.value, stamp(now), op.ttl, expires_at)
    )
    item_id = row[0] if row is not None else cursor.lastrowid
    conn.execute(DELETE_TERMS, (item_id,))
    conn.execute(DELETE_VECTORS, (item_id,))
    if op.terms:
        conn.execute(INSERT_TERMS, (item_id, fts_terms(op.terms)))
    conn.executemany(INSERT_VECTOR, [(item_id, path, blob) for path, blob in op.vectors])


def get(conn: sqlite3.Connection, op: GetOp, now: float) -> tuple[Item | None, int | None]:
    """The live item ``op`` names (or ``None``), and its id when its TTL is to be refreshed."""
    row = conn.execute(SELECT_ITEM, (namespace_text(op.namespace), op.key, now)).fetchone()
    if row is None:
        return None, None
    item = Item(
        value=decode_value(row[3]),
        key=row[2],
        namespace=op.namespace,
        created_at=datetime.fromisoformat(row[4]),
        updated_at=datetime.fromisoformat(row[5]),
    )
    return item, (row[0] if op.refresh_ttl and row[6] is not None else None)


def search_item(row: Row, score: float | None) -> SearchItem:
    """A search result from a row of ``ITEM_COLUMNS``."""
    return SearchItem(
        namespace=tuple(row[1].split(".")),
        key=row[2],
        value=decode_value(row[3]),
        created_at=datetime.fromisoformat(row[4]),
        updated_at=datetime.fromisoformat(row[5]),
        score=score,
    )


def list_namespaces(
    conn: sqlite3.Connection, op: ListNamespacesOp, now: float
) -> list[tuple[str, ...]]:
    """The namespaces holding live items that ``op`` selects (see ``select_namespaces``)."""
    rows = conn.execute(LIST_NAMESPACES, scope(literal_prefix(op), now))
    return select_namespaces((tuple(text.split(".")) for (text,) in rows), op)


def refresh_ttl(conn: sqlite3.Connection, ids: Sequence[int], now: float) -> None:
    """Restart the TTL clock of the items ``ids`` that have a TTL and are still live."""
    conn.executemany(REFRESH_TTL, [(now, item_id) for item_id in ids])


def sweep(conn: sqlite3.Connection, now: float) -> int:
    """Delete every item expired at ``now`` with its terms and vectors; return how many."""
    expired = [item_id for (item_id,) in conn.execute(EXPIRED_IDS, (now,)).fetchall()]
    for item_id in expired:
        _remove(conn, item_id)
    return len(expired)


def _remove(conn: sqlite3.Connection, item_id: int) -> None:
    conn.execute(DELETE_TERMS, (item_id,))
    conn.execute(DELETE_VECTORS, (item_id,))
    conn.execute(DELETE_ITEM, (item_id,))

"""The SQLite memory store's operations, each run on a connection inside a transaction that
:class:`statekeeper.memory.store.SqliteStore` opened (search is in ``_sqlite_store_search``).

Times are Unix seconds (``now``), read once per batch, so every operation of a batch sees
the same instant: an item expired for one of them is expired for all.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from langgraph.store.base import GetOp, Item, ListNamespacesOp, MatchCondition, SearchItem

from statekeeper.errors import ConfigurationError
from statekeeper.memory._sqlite_store_schema import (
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
    namespace_text,
    scope,
)
from statekeeper.memory._sqlite_store_values import decode_value

__all__ = [
    "Write",
    "check_page",
    "get",
    "list_namespaces",
    "refresh_ttl",
    "search_item",
    "sweep",
    "write",
]

# A row of ITEM_COLUMNS: id, namespace, key, value, created_at, updated_at, ttl_minutes.
Row = tuple[Any, ...]


@dataclass(frozen=True)
class Write:
    """A put or delete, encoded before the transaction so that it only runs SQL."""

    namespace: str  # namespace_text() of the namespace
    key: str
    value: str | None  # the value as JSON; None deletes the item
    ttl: float | None  # minutes
    terms: str  # fts_terms() of the indexed text; "" indexes nothing
    vectors: tuple[tuple[str, bytes], ...]  # (path, packed embedding)


def write(conn: sqlite3.Connection, op: Write, now: float) -> None:
    """Put or delete one item with its terms and vectors. A put keeps the item's id and
    ``created_at`` when the key exists and sets ``updated_at`` to ``now``."""
    row = conn.execute(SELECT_ID, (op.namespace, op.key)).fetchone()
    if op.value is None:
        if row is not None:
            _remove(conn, row[0])
        return
    expires_at = None if op.ttl is None else now + op.ttl * 60.0
    cursor = conn.execute(
        UPSERT_ITEM, (op.namespace, op.key, op.value, _stamp(now), op.ttl, expires_at)
    )
    item_id = row[0] if row is not None else cursor.lastrowid
    conn.execute(DELETE_TERMS, (item_id,))
    conn.execute(DELETE_VECTORS, (item_id,))
    if op.terms:
        conn.execute(INSERT_TERMS, (item_id, op.terms))
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
    """The namespaces holding live items that meet every condition, truncated to
    ``max_depth`` labels, distinct, sorted, then paged by ``offset`` and ``limit``."""
    conditions = tuple(op.match_conditions or ())
    for condition in conditions:
        if condition.match_type not in ("prefix", "suffix"):
            raise ConfigurationError(
                f"unknown namespace match type {condition.match_type!r}; use 'prefix' or 'suffix'"
            )
    check_page(op.limit, op.offset)
    if op.max_depth is not None and op.max_depth < 1:
        raise ConfigurationError(f"max_depth must be at least 1, got {op.max_depth!r}")
    rows = conn.execute(LIST_NAMESPACES, scope(_literal_prefix(conditions), now))
    found = {tuple(text.split(".")) for (text,) in rows}
    kept = {
        ns[: op.max_depth] if op.max_depth is not None else ns
        for ns in found
        if all(_matches(condition, ns) for condition in conditions)
    }
    return sorted(kept)[op.offset : op.offset + op.limit]


def refresh_ttl(conn: sqlite3.Connection, ids: Sequence[int], now: float) -> None:
    """Restart the TTL clock of the items ``ids`` that have a TTL and are still live."""
    conn.executemany(REFRESH_TTL, [(now, item_id) for item_id in ids])


def sweep(conn: sqlite3.Connection, now: float) -> int:
    """Delete every item expired at ``now`` with its terms and vectors; return how many."""
    expired = [item_id for (item_id,) in conn.execute(EXPIRED_IDS, (now,)).fetchall()]
    for item_id in expired:
        _remove(conn, item_id)
    return len(expired)


def check_page(limit: int, offset: int) -> None:
    """Refuse a negative ``limit`` or ``offset`` (a slice would count them from the end)."""
    if not isinstance(limit, int) or limit < 0 or not isinstance(offset, int) or offset < 0:
        raise ConfigurationError(
            f"limit and offset must be integers >= 0, got limit={limit!r}, offset={offset!r}"
        )


def _remove(conn: sqlite3.Connection, item_id: int) -> None:
    conn.execute(DELETE_TERMS, (item_id,))
    conn.execute(DELETE_VECTORS, (item_id,))
    conn.execute(DELETE_ITEM, (item_id,))


def _literal_prefix(conditions: tuple[MatchCondition, ...]) -> tuple[str, ...]:
    # The labels before the first wildcard of a prefix condition narrow the query in SQL;
    # every condition is then checked exactly in Python.
    for condition in conditions:
        if condition.match_type == "prefix":
            path = tuple(condition.path)
            return path[: path.index("*")] if "*" in path else path
    return ()


def _matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if not path:
        return True
    if len(namespace) < len(path):
        return False
    part = namespace[: len(path)] if condition.match_type == "prefix" else namespace[-len(path) :]
    return all(p == "*" or p == n for p, n in zip(path, part, strict=True))


def _stamp(now: float) -> str:
    # Fixed width, so text order is time order.
    return datetime.fromtimestamp(now, UTC).isoformat(timespec="microseconds")

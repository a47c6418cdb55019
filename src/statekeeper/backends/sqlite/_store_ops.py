"""The SQLite memory store's operations, each run on a connection inside a transaction that
:class:`~statekeeper.backends.sqlite.store.SqliteStore` opened. Times are Unix seconds
(``now``), read once per batch (see :mod:`statekeeper.memory.store.base`).

Search: a filtered listing without a query, relevance with one. Relevance (see
``docs/memory-store.md``): FTS5 finds the items holding any query term and ranks them by
``bm25()``; each gets the lexical score of :mod:`statekeeper.memory.store.lexical` over
the collection under the namespace prefix. With embeddings, every item under the prefix
that has one also gets ``max(0, cosine)`` of its best-matching text, and the score is
``(1 - semantic_weight) * lexical + semantic_weight * semantic``. Items scoring 0 are
never returned; the rest come best first, equal scores in BM25 order, then newest first.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import closing
from datetime import datetime
from typing import Any

from langgraph.store.base import GetOp, Item, ListNamespacesOp, SearchItem, SearchOp

from statekeeper.backends.sqlite._store_schema import (
    COUNT_SCOPE,
    DELETE_ITEM,
    DELETE_TERMS,
    DELETE_VECTORS,
    EXPIRED_IDS,
    INSERT_TERMS,
    INSERT_VECTOR,
    LIST_NAMESPACES,
    LIST_SCOPE,
    REFRESH_TTL,
    SELECT_ID,
    SELECT_ITEM,
    SELECT_MATCHES,
    SELECT_VECTORS,
    UPSERT_ITEM,
    fts_query,
    fts_terms,
    namespace_text,
    scope,
)
from statekeeper.memory.store.base import Write, stamp
from statekeeper.memory.store.lexical import query_terms
from statekeeper.memory.store.search import (
    Fusion,
    lexical_scores,
    literal_prefix,
    rank,
    select_namespaces,
    similarity,
)
from statekeeper.memory.store.values import decode_value, matches_filter

__all__ = [
    "get",
    "list_namespaces",
    "refresh_ttl",
    "search",
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


def search(
    conn: sqlite3.Connection,
    op: SearchOp,
    now: float,
    query_vector: Sequence[float] | None,
    fusion: Fusion,
) -> tuple[list[SearchItem], list[int]]:
    """Run one search; return the page of results and the ids whose TTL is to be refreshed.

    Without ``op.query`` (``None`` or ``""``): every live item under the prefix that meets
    the filter, newest first, ``score`` ``None``. With a query: only items whose relevance
    is above 0, best first, ``score`` in [0, 1]; a query of no searchable words (only
    stopwords or spaces) and no embedding finds nothing.
    """
    params = scope(op.namespace_prefix, now)
    page: Sequence[tuple[Row, float | None]]
    if op.query:
        ranked = _ranked(conn, op, params, query_vector, fusion)
        page = ranked[op.offset : op.offset + op.limit]
    else:
        page = [(row, None) for row in _listing(conn, op, params)]
    refresh = [row[0] for row, _ in page if op.refresh_ttl and row[6] is not None]
    return [search_item(row, score) for row, score in page], refresh


def _listing(conn: sqlite3.Connection, op: SearchOp, params: tuple[Any, ...]) -> list[Row]:
    # Reads rows lazily and stops at the page's end: a filter is checked in Python, exactly.
    found: list[Row] = []
    if op.limit == 0:
        return found
    skipped = 0
    with closing(conn.execute(LIST_SCOPE, params)) as cursor:
        for row in cursor:
            if op.filter and not matches_filter(decode_value(row[3]), op.filter):
                continue
            if skipped < op.offset:
                skipped += 1
                continue
            found.append(row)
            if len(found) == op.limit:
                break
    return found


def _ranked(
    conn: sqlite3.Connection,
    op: SearchOp,
    params: tuple[Any, ...],
    query_vector: Sequence[float] | None,
    fusion: Fusion,
) -> list[tuple[Row, float]]:
    assert op.query is not None
    wanted = query_terms(op.query)
    rows: dict[int, Row] = {}  # BM25 order first, then newest first
    lexical: dict[int, float] = {}
    if wanted:
        by_hex = {term.encode("utf-8").hex(): term for term in wanted}
        found: dict[int, frozenset[str]] = {}
        for *row, stored, _rank in conn.execute(SELECT_MATCHES, (*params, fts_query(wanted))):
            rows[row[0]] = tuple(row)
            found[row[0]] = frozenset(by_hex[h] for h in stored.split() if h in by_hex)
        # Document frequencies over the whole collection under the prefix, so scores do
        # not depend on the filter or the page, nor on what other namespaces hold.
        (n_docs,) = conn.execute(COUNT_SCOPE, params).fetchone()
        lexical = lexical_scores(wanted, n_docs, found)
    semantic = None
    if query_vector is not None:
        semantic = {}
        for item_id, (row, blobs) in _vectors(conn, params).items():
            rows.setdefault(item_id, row)
            semantic[item_id] = similarity(query_vector, blobs)

    def keep(item_id: int) -> bool:
        return not op.filter or matches_filter(decode_value(rows[item_id][3]), op.filter)

    ranked = rank(list(rows), lexical, semantic, fusion, keep)
    return [(rows[item_id], score) for item_id, score in ranked]


def _vectors(
    conn: sqlite3.Connection, params: tuple[Any, ...]
) -> dict[int, tuple[Row, list[bytes]]]:
    """Every item under the prefix with an embedding, newest first, with its vectors."""
    found: dict[int, tuple[Row, list[bytes]]] = {}
    for *row, blob in conn.execute(SELECT_VECTORS, params):
        found.setdefault(row[0], (tuple(row), []))[1].append(blob)
    return found

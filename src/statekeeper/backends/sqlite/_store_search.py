"""Search in the SQLite memory store: a filtered listing without a query, relevance with one.

Relevance (see ``docs/memory-store.md``): FTS5 finds the items holding any query term and
ranks them by ``bm25()``; each gets the lexical score of :mod:`statekeeper.memory.store.lexical`
over the collection under the namespace prefix. With embeddings, every item under the
prefix that has one also gets ``max(0, cosine)`` of its best-matching text, and the score
is ``(1 - semantic_weight) * lexical + semantic_weight * semantic``. Items scoring 0 are
never returned; the rest come best first, equal scores in BM25 order, then newest first.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import closing
from typing import Any

from langgraph.store.base import SearchItem, SearchOp

from statekeeper.backends.sqlite._store_ops import Row, search_item
from statekeeper.backends.sqlite._store_schema import (
    COUNT_SCOPE,
    LIST_SCOPE,
    SELECT_MATCHES,
    SELECT_VECTORS,
    fts_query,
    scope,
)
from statekeeper.memory.store.lexical import query_terms
from statekeeper.memory.store.search import lexical_scores, rank, similarity
from statekeeper.memory.store.values import decode_value, matches_filter

__all__ = ["search"]


def search(
    conn: sqlite3.Connection,
    op: SearchOp,
    now: float,
    query_vector: Sequence[float] | None,
    semantic_weight: float,
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
        ranked = _ranked(conn, op, params, query_vector, semantic_weight)
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
    semantic_weight: float,
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

    ranked = rank(list(rows), lexical, semantic, semantic_weight, keep)
    return [(rows[item_id], score) for item_id, score in ranked]


def _vectors(
    conn: sqlite3.Connection, params: tuple[Any, ...]
) -> dict[int, tuple[Row, list[bytes]]]:
    """Every item under the prefix with an embedding, newest first, with its vectors."""
    found: dict[int, tuple[Row, list[bytes]]] = {}
    for *row, blob in conn.execute(SELECT_VECTORS, params):
        found.setdefault(row[0], (tuple(row), []))[1].append(blob)
    return found

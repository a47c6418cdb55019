"""The SQLite memory store's schema and the SQL it runs.

Every statement is a constant with ``?`` placeholders: namespaces, keys, query terms and
filter values only ever travel as parameters. Tables (component ``"memory"`` of
:class:`~._database.Database`, so they can share a file with the checkpoints):

* ``memory_items`` — one row per (namespace, key): the value as JSON, timestamps, TTL.
  The namespace is stored as its labels joined by ``.``, which no label may contain, so
  the text is unambiguous and a namespace prefix is a range of it (see :func:`scope`).
* ``memory_terms`` — FTS5, one row per indexed item (``rowid`` = the item's ``id``): the
  item's normalised terms (:mod:`statekeeper.memory.store.lexical`), each hex-encoded so that
  SQLite's tokenizer sees exactly those terms, in any script, and a query can never be
  read as FTS5 syntax.
* ``memory_vectors`` — one embedding per indexed text of an item, as little-endian
  float32, normalised to length 1.
"""

from __future__ import annotations

from collections.abc import Sequence

from statekeeper.backends.sqlite._database import Migration

__all__ = [
    "COUNT_SCOPE",
    "DELETE_ITEM",
    "DELETE_TERMS",
    "DELETE_VECTORS",
    "EXPIRED_IDS",
    "INSERT_TERMS",
    "INSERT_VECTOR",
    "ITEM_COLUMNS",
    "LIST_NAMESPACES",
    "LIST_SCOPE",
    "MIGRATIONS",
    "REFRESH_TTL",
    "SELECT_ID",
    "SELECT_ITEM",
    "SELECT_MATCHES",
    "SELECT_VECTORS",
    "UPSERT_ITEM",
    "fts_query",
    "fts_terms",
    "namespace_text",
    "scope",
]

MIGRATIONS = (
    Migration(
        1,
        "memory items, their full-text terms and their embeddings",
        (
            """CREATE TABLE memory_items (
                id INTEGER PRIMARY KEY,
                namespace TEXT NOT NULL,
                key TEXT NOT NULL,
                value TEXT NOT NULL,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL,
                ttl_minutes REAL,
                expires_at REAL,
                UNIQUE (namespace, key))""",
            "CREATE INDEX memory_items_updated ON memory_items (updated_at)",
            """CREATE INDEX memory_items_expiry ON memory_items (expires_at)
                WHERE expires_at IS NOT NULL""",
            "CREATE VIRTUAL TABLE memory_terms USING fts5(terms, tokenize = 'ascii')",
            """CREATE TABLE memory_vectors (
                item_id INTEGER NOT NULL,
                path TEXT NOT NULL,
                vector BLOB NOT NULL,
                PRIMARY KEY (item_id, path))""",
        ),
    ),
)

# The namespace scope of a search: ``?1`` the prefix text, ``?2`` it + ".", ``?3`` it + "/".
# Every namespace under the prefix sorts between "prefix." and "prefix/" ("/" follows "."),
# and the comparison is bytewise, so LIKE/GLOB wildcards in labels mean nothing here.
_SCOPE = "(?1 = '' OR i.namespace = ?1 OR (i.namespace >= ?2 AND i.namespace < ?3))"
_LIVE = "(i.expires_at IS NULL OR i.expires_at > ?4)"

# The statements below are composed from the constants above only (hence the noqa): every
# value reaches SQLite as a bound parameter.
ITEM_COLUMNS = "i.id, i.namespace, i.key, i.value, i.created_at, i.updated_at, i.ttl_minutes"

SELECT_ITEM = f"""SELECT {ITEM_COLUMNS} FROM memory_items i
    WHERE i.namespace = ? AND i.key = ? AND (i.expires_at IS NULL OR i.expires_at > ?)"""  # noqa: S608

# Newest first; namespace and key make the order total.
LIST_SCOPE = f"""SELECT {ITEM_COLUMNS} FROM memory_items i WHERE {_SCOPE} AND {_LIVE}
    ORDER BY i.updated_at DESC, i.namespace, i.key"""  # noqa: S608

COUNT_SCOPE = f"SELECT count(*) FROM memory_items i WHERE {_SCOPE} AND {_LIVE}"  # noqa: S608

# ``?5`` is the FTS5 query: the terms, quoted and joined by OR (see fts_query).
SELECT_MATCHES = f"""SELECT {ITEM_COLUMNS}, t.terms, bm25(memory_terms)
    FROM memory_terms t JOIN memory_items i ON i.id = t.rowid
    WHERE memory_terms MATCH ?5 AND {_SCOPE} AND {_LIVE}
    ORDER BY bm25(memory_terms), i.updated_at DESC, i.namespace, i.key"""  # noqa: S608

SELECT_VECTORS = f"""SELECT {ITEM_COLUMNS}, v.vector
    FROM memory_vectors v JOIN memory_items i ON i.id = v.item_id
    WHERE {_SCOPE} AND {_LIVE}
    ORDER BY i.updated_at DESC, i.namespace, i.key"""  # noqa: S608

LIST_NAMESPACES = f"SELECT DISTINCT i.namespace FROM memory_items i WHERE {_SCOPE} AND {_LIVE}"  # noqa: S608

# Keeps id (the terms and vectors refer to it) and created_at of an item written before.
UPSERT_ITEM = """INSERT INTO memory_items
    (namespace, key, value, created_at, updated_at, ttl_minutes, expires_at)
    VALUES (?1, ?2, ?3, ?4, ?4, ?5, ?6)
    ON CONFLICT (namespace, key) DO UPDATE SET
        value = excluded.value, updated_at = excluded.updated_at,
        ttl_minutes = excluded.ttl_minutes, expires_at = excluded.expires_at"""

DELETE_ITEM = "DELETE FROM memory_items WHERE id = ?"
DELETE_TERMS = "DELETE FROM memory_terms WHERE rowid = ?"
DELETE_VECTORS = "DELETE FROM memory_vectors WHERE item_id = ?"
INSERT_TERMS = "INSERT INTO memory_terms (rowid, terms) VALUES (?, ?)"
INSERT_VECTOR = "INSERT INTO memory_vectors (item_id, path, vector) VALUES (?, ?, ?)"

SELECT_ID = "SELECT id FROM memory_items WHERE namespace = ? AND key = ?"
EXPIRED_IDS = "SELECT id FROM memory_items WHERE expires_at <= ?"
REFRESH_TTL = """UPDATE memory_items SET expires_at = ?1 + ttl_minutes * 60
    WHERE id = ?2 AND ttl_minutes IS NOT NULL AND expires_at > ?1"""


def namespace_text(namespace: tuple[str, ...]) -> str:
    """A namespace as stored: its labels joined by ``.`` (labels never contain one)."""
    return ".".join(namespace)


def scope(prefix: tuple[str, ...], now: float) -> tuple[str, str, str, float]:
    """Parameters ``?1``-``?4`` of the scoped queries: every item under ``prefix`` (all
    items for ``()``) that has not expired at ``now``."""
    text = namespace_text(prefix)
    return (text, text + ".", text + "/", now)


def fts_terms(terms: Sequence[str]) -> str:
    """Normalised terms as stored in ``memory_terms``: hex-encoded, space-separated."""
    return " ".join(term.encode("utf-8").hex() for term in terms)


def fts_query(terms: tuple[str, ...]) -> str:
    """An FTS5 query matching any of ``terms``. Hex digits are never FTS5 syntax; the
    quotes say so explicitly."""
    return " OR ".join(f'"{term.encode("utf-8").hex()}"' for term in terms)

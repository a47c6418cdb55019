"""``PostgresStore``: a memory store in a PostgreSQL schema (it may be the checkpointer's).

One row per item (``memory_items``): the value as JSON text, timestamps, TTL, the item's
normalised search terms and its embeddings. Each put and delete is one statement. Search
reads the live items under the prefix and scores them in Python, with the same code as
the file and Redis stores (:mod:`statekeeper.memory.store.items`), so scores are the same
on every backend.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Self

from langgraph.store.base import IndexConfig, TTLConfig

from statekeeper.backends.postgres import (
    POOL_OPTIONS,
    Connection,
    decode_id,
    encode_id,
    split_options,
)
from statekeeper.backends.postgres._database import Database, Migration
from statekeeper.backends.postgres._running import Op, Q
from statekeeper.errors import ReadOnlyError, SerializationError, StorageError
from statekeeper.memory.store.base import Plan, Write
from statekeeper.memory.store.items import ItemStore, Namespace, StoredItem
from statekeeper.urls import OptionKind, StorageURL, parse_options

__all__ = ["PostgresStore"]

_OPTIONS: dict[str, OptionKind] = {
    **POOL_OPTIONS,
    "semantic_weight": float,
    "ttl": object,
    "index": object,
}
C = 'COLLATE "C"'
MIGRATIONS = (
    Migration(
        1,
        "memory items with their terms and embeddings",
        (
            f"""CREATE TABLE memory_items (
                namespace text {C} NOT NULL,
                key text {C} NOT NULL,
                value text NOT NULL,
                created_at text NOT NULL,
                updated_at text NOT NULL,
                ttl_minutes double precision,
                expires_at double precision,
                terms text[] NOT NULL,
                vector_paths text[] NOT NULL,
                vectors bytea[] NOT NULL,
                PRIMARY KEY (namespace, key))""",
            "CREATE INDEX memory_items_expiry ON memory_items (expires_at)"
            " WHERE expires_at IS NOT NULL",
        ),
    ),
)
_COLUMNS = (
    "namespace, key, value, created_at, updated_at, ttl_minutes, expires_at, terms,"
    " vector_paths, vectors"
)
_LIVE = "(expires_at IS NULL OR expires_at > %(now)s)"
# Every namespace under a prefix sorts between "prefix." and "prefix/" ("/" follows ".")
_SCOPE = (
    "(%(p)s = '' OR namespace = %(p)s OR (namespace >= %(p)s || '.' AND namespace < %(p)s || '/'))"
)
# A put keeps created_at of a live item it replaces.
_PUT = f"""INSERT INTO memory_items ({_COLUMNS})
    VALUES (%(ns)s, %(key)s, %(value)s, %(created)s, %(updated)s, %(ttl)s, %(expires)s,
        %(terms)s::text[], %(paths)s::text[], %(vectors)s::bytea[])
    ON CONFLICT (namespace, key) DO UPDATE SET
        value = excluded.value, updated_at = excluded.updated_at,
        created_at = CASE WHEN memory_items.expires_at IS NULL
            OR memory_items.expires_at > %(now)s THEN memory_items.created_at
            ELSE excluded.created_at END,
        ttl_minutes = excluded.ttl_minutes, expires_at = excluded.expires_at,
        terms = excluded.terms, vector_paths = excluded.vector_paths,
        vectors = excluded.vectors"""  # noqa: S608 - constant columns


class PostgresStore(ItemStore):
    """A LangGraph store in a PostgreSQL schema.

    Args:
        connection: as for :class:`~statekeeper.backends.postgres.checkpointer.PostgresCheckpointer`
            (``schema``, ``mode``, pool settings); the store may share the schema of a
            checkpointer: each records its own migrations there.
        index, ttl, semantic_weight: as for :class:`~statekeeper.memory.store.SqliteStore`.

    Guarantees (besides :class:`~statekeeper.memory.store.MemoryStore`'s): each put and
    delete is one statement (atomic); every statement is parameterised; namespaces and
    keys of any unicode text are stored exactly. Search reads every live item under the
    searched prefix: O(items). ``mode="ro"``: a batch with a put or delete, and
    ``sweep_ttl``, raise :class:`~statekeeper.errors.ReadOnlyError`, and reads do not
    restart TTL clocks.
    """

    def __init__(
        self,
        connection: Connection,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        semantic_weight: float = 0.5,
    ) -> None:
        super().__init__(index=index, ttl=ttl, semantic_weight=semantic_weight)
        self._db = Database(connection, component="memory", migrations=MIGRATIONS)
        self.read_only = self._db.read_only

    @classmethod
    def from_url(cls, url: StorageURL, options: Mapping[str, Any]) -> Self:
        """Build from a parsed URL: its query options (text) and keyword ``options``
        (``index`` among them); keywords win."""
        merged = parse_options("PostgreSQL memory store", _OPTIONS, split_options(url), options)
        pool = {k: merged.pop(k) for k in list(merged) if k in POOL_OPTIONS}
        return cls(Connection.from_url(url, pool), **merged)

    def close(self) -> None:
        """Close the pools. Idempotent; later calls raise StorageError."""
        super().close()
        self._db.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._db.display!r})"

    def _writable(self, operation: str) -> None:
        if self.read_only:
            raise ReadOnlyError(
                f"cannot {operation}: {self!r} is open read-only (mode=ro); open it "
                "read-write to change it"
            )

    def _run(self, plan: Plan, now: float) -> list[Any]:
        if plan.writes:
            self._writable("put or delete items")
        return super()._run(plan, now)

    # -- ItemStore -------------------------------------------------------------------------

    def _put(self, write: Write, now: float) -> None:
        self._db.run(lambda: _put_op(write, now), write=True)

    def _load(self, namespace: Namespace, key: str) -> StoredItem | None:
        rows = self._db.run(lambda: _load_op(namespace, key))
        return _item(rows[0]) if rows else None

    def _scan(self, prefix: Namespace, now: float) -> list[StoredItem]:
        params = {"p": _namespace(prefix), "now": now}
        sql = f"SELECT {_COLUMNS} FROM memory_items WHERE {_SCOPE} AND {_LIVE}"  # noqa: S608
        return [_item(row) for row in self._db.run(lambda: _query(sql, params))]

    def _namespaces(self, prefix: Namespace, now: float) -> list[Namespace]:
        params = {"p": _namespace(prefix), "now": now}
        sql = f"SELECT DISTINCT namespace FROM memory_items WHERE {_SCOPE} AND {_LIVE}"  # noqa: S608
        return [_labels(text) for (text,) in self._db.run(lambda: _query(sql, params))]

    def _refresh(self, items: Sequence[StoredItem], now: float) -> None:
        if self.read_only:  # reading never writes in read-only mode
            return
        params = {
            "now": now,
            "ns": [_namespace(item.namespace) for item in items],
            "key": [encode_id(item.key) for item in items],
        }
        sql = (
            "UPDATE memory_items SET expires_at = %(now)s + ttl_minutes * 60"
            " WHERE (namespace, key) IN (SELECT * FROM unnest(%(ns)s::text[], %(key)s::text[]))"
            " AND ttl_minutes IS NOT NULL AND expires_at > %(now)s"
        )
        self._db.run(lambda: _query(sql, params, "count"), write=True)

    def _sweep(self, now: float) -> int:
        if self._closed:
            raise StorageError(f"{self!r} is closed; open a new store")
        self._writable("delete expired items")
        sql = "DELETE FROM memory_items WHERE expires_at <= %(now)s"
        count: int = self._db.run(lambda: _query(sql, {"now": now}, "count"), write=True)
        return count


def _namespace(namespace: Iterable[str]) -> str:
    """A namespace as stored: its labels (encoded) joined by ``.``, which none contains."""
    return ".".join(encode_id(label) for label in namespace)


def _labels(text: str) -> Namespace:
    return tuple(decode_id(label) for label in text.split("."))


def _query(sql: str, params: dict[str, Any], fetch: str = "all") -> Op[Any]:
    return (yield Q(sql, params, fetch))  # type: ignore[arg-type]


def _load_op(namespace: Namespace, key: str) -> Op[Any]:
    return (
        yield Q(
            f"SELECT {_COLUMNS} FROM memory_items WHERE namespace = %s AND key = %s",  # noqa: S608
            (_namespace(namespace), encode_id(key)),
        )
    )


def _put_op(write: Write, now: float) -> Op[None]:
    ns, key = _namespace(write.namespace), encode_id(write.key)
    if write.value is None:
        yield Q("DELETE FROM memory_items WHERE namespace = %s AND key = %s", (ns, key), "count")
        return
    item = StoredItem.made(write, None, now)  # the statement keeps a live item's created_at
    try:
        item.value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SerializationError(
            f"the value of item {write.key!r} holds a lone surrogate at index {exc.start}, "
            "which PostgreSQL text cannot hold; store valid unicode text"
        ) from None
    yield Q(
        _PUT,
        {
            "ns": ns,
            "key": key,
            "value": item.value,
            "created": item.created_at,
            "updated": item.updated_at,
            "ttl": item.ttl,
            "expires": item.expires_at,
            "terms": list(item.terms),
            "paths": [path for path, _ in item.vectors],
            "vectors": [blob for _, blob in item.vectors],
            "now": now,
        },
        "count",
    )


def _item(row: Any) -> StoredItem:
    return StoredItem(
        namespace=_labels(row[0]),
        key=decode_id(row[1]),
        value=row[2],
        created_at=row[3],
        updated_at=row[4],
        ttl=row[5],
        expires_at=row[6],
        terms=tuple(row[7]),
        vectors=tuple(zip(row[8], (bytes(v) for v in row[9]), strict=True)),
    )

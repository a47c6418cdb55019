"""The SQLite memory store: items in one database file (or in memory), searched with FTS5.

It may share the file of a :class:`~statekeeper.backends.sqlite.checkpointer.SqliteCheckpointer`:
each records its own schema migrations there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Self

from langgraph.store.base import (
    GetOp,
    IndexConfig,
    ListNamespacesOp,
    Op,
    Result,
    SearchOp,
    TTLConfig,
)

from statekeeper.backends.sqlite import database_path
from statekeeper.backends.sqlite._database import MEMORY, Database
from statekeeper.backends.sqlite._store_ops import (
    get,
    list_namespaces,
    refresh_ttl,
    search,
    sweep,
    write,
)
from statekeeper.backends.sqlite._store_schema import MIGRATIONS
from statekeeper.errors import ReadOnlyError
from statekeeper.memory.store.base import MemoryStore, Plan, Write
from statekeeper.urls import OptionKind, StorageURL, parse_options

__all__ = ["SqliteStore"]

_OPTIONS: dict[str, OptionKind] = {
    "busy_timeout": float,
    "mode": str,
    "semantic_weight": float,
    "ttl": object,
    "index": object,
}


class SqliteStore(MemoryStore):
    """A LangGraph store in one SQLite file (or in memory with ``":memory:"``).

    Args:
        path: the database file; created with its parent directories if missing. It may
            be the file a :class:`~statekeeper.checkpointers.SqliteCheckpointer` uses.
        index: LangGraph's index configuration: ``fields`` (paths to the text to search;
            default: a note's ``text`` and ``topics``, every string of other values) and,
            optionally, ``embed`` (a LangChain ``Embeddings``, an embedding function or a
            ``"provider:model"`` string) with ``dims``. Without ``embed``, search is lexical.
        ttl: LangGraph's TTL configuration: ``default_ttl`` (minutes) and
            ``refresh_on_read`` (default true). Expired items are never returned and are
            deleted by the next write or :meth:`sweep_ttl`.
        busy_timeout: seconds a writer waits for another process's write lock.
        semantic_weight: with ``embed``, the share of the score that is semantic.
        mode: ``"rw"`` (default) or ``"ro"``: read-only, which never creates or changes
            anything (a missing file raises
            :class:`~statekeeper.errors.StorageNotFoundError`): every batch with a put or
            delete, and :meth:`sweep_ttl`, raise :class:`~statekeeper.errors.ReadOnlyError`
            before anything is done, and reads do not restart TTL clocks. A file (or
            directory) that is not writable is opened read-only too (``read_only``).

    Guarantees (besides :class:`MemoryStore`'s): a batch runs in one transaction (a
    failed batch writes nothing); every SQL statement is parameterised; several processes
    can share one file.
    """

    def __init__(
        self,
        path: str = MEMORY,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        busy_timeout: float = 30.0,
        semantic_weight: float = 0.5,
        mode: str = "rw",
    ) -> None:
        super().__init__(index=index, ttl=ttl, semantic_weight=semantic_weight)
        self._db = Database(
            path, component="memory", migrations=MIGRATIONS, busy_timeout=busy_timeout, mode=mode
        )
        self.read_only = self._db.read_only

    @classmethod
    def from_url(cls, url: StorageURL, options: Mapping[str, Any]) -> Self:
        """Open the database a ``sqlite://`` or ``memory://`` URL names, with its query
        options (text) and keyword ``options`` (``index`` among them); keywords win."""
        merged = parse_options("memory store", _OPTIONS, url.options, options)
        return cls(database_path(url), **merged)

    @property
    def path(self) -> str:
        """The database file (``":memory:"`` for an in-memory database)."""
        return self._db.path

    def close(self) -> None:
        """Close the database. Idempotent; later calls raise StorageError."""
        self._db.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r})"

    def _writable(self, operation: str) -> None:
        if self.read_only:
            raise ReadOnlyError(
                f"cannot {operation}: {self!r} is open read-only (mode=ro, or the file is "
                "not writable); open it read-write on writable storage to change it"
            )

    def _plan(self, ops: Iterable[Op]) -> Plan:
        # refused before any embedding is computed, and before any lock is taken
        plan = super()._plan(ops)
        if plan.writes:
            self._writable("put or delete items")
        return plan

    def _sweep(self, now: float) -> int:
        self._writable("sweep expired items")
        with self._db.transaction(write=True) as conn:
            return sweep(conn, now)

    def _run(self, plan: Plan, now: float) -> list[Result]:
        writes = bool(plan.writes)
        results: list[Result] = []
        refresh: list[int] = []
        with self._db.transaction(write=writes) as conn:
            if writes:
                sweep(conn, now)
            for step in plan.steps:
                if isinstance(step, Write):
                    write(conn, step, now)
                    results.append(None)
                elif isinstance(step, GetOp):
                    item, item_id = get(conn, step, now)
                    results.append(item)
                    if item_id is not None:
                        refresh.append(item_id)
                elif isinstance(step, SearchOp):
                    vector = plan.query_vectors.get(step.query or "")
                    found, ids = search(conn, step, now, vector, self.fusion)
                    results.append(found)
                    refresh.extend(ids)
                else:
                    assert isinstance(step, ListNamespacesOp)
                    results.append(list_namespaces(conn, step, now))
            if writes and refresh:
                refresh_ttl(conn, refresh, now)
        if refresh and not writes and not self.read_only:
            # Reads take no write lock unless an item they returned has a TTL to restart.
            with self._db.transaction(write=True) as conn:
                refresh_ttl(conn, refresh, now)
        return results

"""Memory stores: LangGraph ``BaseStore`` implementations chosen by URL.

>>> from statekeeper.memory import open_store
>>> with open_store("sqlite:///.statekeeper/memory.db") as store:  # doctest: +SKIP
...     graph = builder.compile(checkpointer=saver, store=store)

Search works without an embedding model: a query is scored by lexical relevance, a
normalised score in [0, 1] (see ``docs/memory-store.md``); with ``index={"embed": ...}``
the score mixes in the cosine similarity of the embeddings. Every backend (SQLite, plain
files, Redis) gives the same items the same scores.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Self

from langgraph.store.base import GetOp, IndexConfig, ListNamespacesOp, Result, SearchOp, TTLConfig

from statekeeper._sqlite import MEMORY, Database
from statekeeper._urls import StorageURL, parse_options, parse_url, redact
from statekeeper.errors import ConfigurationError
from statekeeper.memory._file_store import FileStore
from statekeeper.memory._sqlite_store_ops import get, list_namespaces, refresh_ttl, sweep, write
from statekeeper.memory._sqlite_store_schema import MIGRATIONS
from statekeeper.memory._sqlite_store_search import search
from statekeeper.memory._store_base import MemoryStore, Plan, Write

if TYPE_CHECKING:
    from statekeeper.memory._redis_store import RedisStore

__all__ = [
    "FileStore",
    "MemoryStore",
    "RedisStore",
    "SqliteStore",
    "known_store_schemes",
    "open_store",
]

_OPTIONS: dict[str, type] = {"busy_timeout": float, "semantic_weight": float, "ttl": object}


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
    ) -> None:
        super().__init__(index=index, ttl=ttl, semantic_weight=semantic_weight)
        self._db = Database(
            path, component="memory", migrations=MIGRATIONS, busy_timeout=busy_timeout
        )

    @classmethod
    def from_url_options(
        cls,
        path: str,
        url_options: Mapping[str, str],
        options: Mapping[str, Any],
        index: IndexConfig | None = None,
    ) -> Self:
        """Build from URL query options (text) and keyword options; keywords win."""
        return cls(
            path, index=index, **parse_options("memory store", _OPTIONS, url_options, options)
        )

    @property
    def path(self) -> str:
        """The database file (``":memory:"`` for an in-memory database)."""
        return self._db.path

    def close(self) -> None:
        """Close the database. Idempotent; later calls raise StorageError."""
        self._db.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r})"

    def _sweep(self, now: float) -> int:
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
                    found, ids = search(conn, step, now, vector, self.semantic_weight)
                    results.append(found)
                    refresh.extend(ids)
                else:
                    assert isinstance(step, ListNamespacesOp)
                    results.append(list_namespaces(conn, step, now))
            if writes and refresh:
                refresh_ttl(conn, refresh, now)
        if refresh and not writes:
            # Reads take no write lock unless an item they returned has a TTL to restart.
            with self._db.transaction(write=True) as conn:
                refresh_ttl(conn, refresh, now)
        return results


# -- URLs ---------------------------------------------------------------------------------


def _open_memory(url: StorageURL, options: Mapping[str, Any], index: Any) -> MemoryStore:
    if url.netloc or url.path not in ("", "/"):
        raise ConfigurationError(
            f"memory:// takes no host or path, got {url.raw!r}; write just 'memory://'"
        )
    return SqliteStore.from_url_options(MEMORY, url.options, options, index)


def _open_sqlite(url: StorageURL, options: Mapping[str, Any], index: Any) -> MemoryStore:
    if url.netloc:
        raise ConfigurationError(
            f"sqlite URLs have no host: {url.raw!r}; write sqlite:///relative/path.db "
            "or sqlite:////absolute/path.db"
        )
    # sqlite:///memory.db -> "memory.db" (relative); sqlite:////var/m.db -> "/var/m.db"
    path = url.path[1:] if url.path.startswith("/") else url.path
    if not path:
        raise ConfigurationError(
            f"sqlite URL {url.raw!r} names no file; write sqlite:///path/to/file.db "
            "(or memory:// for a store that lives only in this process)"
        )
    return SqliteStore.from_url_options(path, url.options, options, index)


def _open_file(url: StorageURL, options: Mapping[str, Any], index: Any) -> MemoryStore:
    forms = "write file:///absolute/dir or file://./relative/dir"
    if url.netloc not in ("", "."):
        raise ConfigurationError(f"file URLs have no host: {url.raw!r}; {forms}")
    # file:///var/memory -> "/var/memory"; file://./memory -> "./memory" (from the cwd)
    path = "." + url.path if url.netloc == "." else url.path
    if path in ("", "/", "."):
        raise ConfigurationError(f"file URL {url.raw!r} names no directory; {forms}")
    return FileStore.from_url_options(path, url.options, options, index)


def _open_redis(url: StorageURL, options: Mapping[str, Any], index: Any) -> MemoryStore:
    # Importing the module imports redis; without it, a ConfigurationError says what to install.
    from statekeeper.memory._redis_store import RedisStore

    return RedisStore.from_url_options(url, options, index)


# scheme -> opener; each imports its backend's driver on first use.
_OPENERS: dict[str, Callable[[StorageURL, Mapping[str, Any], Any], MemoryStore]] = {
    "memory": _open_memory,
    "sqlite": _open_sqlite,
    "file": _open_file,
    "redis": _open_redis,
    "rediss": _open_redis,
    "redis+cluster": _open_redis,
    "rediss+cluster": _open_redis,
}


def known_store_schemes() -> list[str]:
    """The URL schemes :func:`open_store` accepts."""
    return list(_OPENERS)


def open_store(url: str, *, index: IndexConfig | None = None, **options: Any) -> MemoryStore:
    """Open the memory store that ``url`` names: a LangGraph ``BaseStore`` that is also a
    context manager and has ``close()``. Every backend scores search the same way.

    Schemes:

    * ``memory://`` — in this process only (SQLite in memory: the same semantics).
    * ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db`` — may be the file the
      checkpoints are in (options ``busy_timeout``).
    * ``file:///absolute/dir``, ``file://./relative/dir`` — one JSON file per item, a folder
      per namespace (options ``lock_timeout``, ``fsync``; POSIX only).
    * ``redis://host:port/db``, ``rediss://...`` (TLS), ``redis+cluster://host:port`` — plain
      Redis 6.2+ or Valkey (options ``prefix``, ``retries``, ``socket_timeout``,
      ``ssl_ca_certs``, ``ssl_cert_reqs``; needs ``pip install 'statekeeper[redis]'``).

    ``index`` is LangGraph's index configuration (see :class:`SqliteStore`). Every backend
    also takes ``semantic_weight`` (URL query options set options too; keywords win) and
    ``ttl`` (LangGraph's ``TTLConfig``; keyword only).

    Raises:
        ConfigurationError: the URL is malformed, its scheme is unknown (the message lists
            the known ones), or an option is unknown or invalid.
        StorageError: the storage cannot be opened or reached.
    """
    if isinstance(url, str) and "://" in url:
        scheme = url.split("://", 1)[0].lower()
        if scheme not in _OPENERS:
            raise ConfigurationError(
                f"no memory store for {scheme + '://'!r} in {redact(url)!r}; known store "
                f"schemes: {', '.join(s + '://' for s in _OPENERS)}"
            )
    parsed = parse_url(url, known_store_schemes())
    return _OPENERS[parsed.scheme](parsed, options, index)


def __getattr__(name: str) -> Any:
    # RedisStore is loaded on first use: `import statekeeper.memory` never imports redis.
    if name == "RedisStore":
        from statekeeper.memory._redis_store import RedisStore

        return RedisStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

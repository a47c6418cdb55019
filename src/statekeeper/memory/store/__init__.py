"""Memory stores: LangGraph ``BaseStore`` implementations chosen by URL.

>>> from statekeeper.memory.store import open_store
>>> with open_store("memory://") as store:
...     store.put(("notes",), "n1", {"text": "Ada prefers tea"})
...     [item.key for item in store.search(("notes",), query="what does Ada drink? tea")]
['n1']

Search works without an embedding model: a query is scored by lexical relevance, a
normalised score in [0, 1] (see ``docs/memory-store.md``); with ``index={"embed": ...}``
the score mixes in the cosine similarity of the embeddings. Every backend (SQLite, plain
files, Redis) gives the same items the same scores: :class:`MemoryStore` (in ``base``)
checks and plans each batch, and the shared rules live in ``search``, ``items`` and
``values``; a backend only runs the planned batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from langgraph.store.base import IndexConfig

from statekeeper.errors import ConfigurationError
from statekeeper.memory.store.base import MemoryStore
from statekeeper.urls import backend_class, parse_url, redact, schemes

if TYPE_CHECKING:
    from statekeeper.backends.file.store import FileStore
    from statekeeper.backends.redis.store import RedisStore
    from statekeeper.backends.sqlite.store import SqliteStore

__all__ = [
    "FileStore",
    "MemoryStore",
    "RedisStore",
    "SqliteStore",
    "known_store_schemes",
    "open_store",
]


def known_store_schemes() -> list[str]:
    """The URL schemes :func:`open_store` accepts."""
    return schemes("store")


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

    ``index`` is LangGraph's index configuration (see
    :class:`~statekeeper.backends.sqlite.store.SqliteStore`). Every backend also takes
    ``semantic_weight`` (URL query options set options too; keywords win) and ``ttl``
    (LangGraph's ``TTLConfig``; keyword only).

    Raises:
        ConfigurationError: the URL is malformed, its scheme is unknown (the message lists
            the known ones), or an option is unknown or invalid.
        StorageError: the storage cannot be opened or reached.
    """
    known = known_store_schemes()
    if isinstance(url, str) and "://" in url:
        scheme = url.split("://", 1)[0].lower()
        if scheme not in known:
            raise ConfigurationError(
                f"no memory store for {scheme + '://'!r} in {redact(url)!r}; known store "
                f"schemes: {', '.join(s + '://' for s in known)}"
            )
    parsed = parse_url(url, known)
    embed = parsed.options.pop("embed", None)
    wanted = embed is not None and embed.strip().casefold() not in ("", "none", "off")
    if wanted and (index is None or "embed" not in index):  # keywords win
        index = cast(IndexConfig, {**(index or {}), "embed": embed})
    store: MemoryStore = backend_class("store", scheme=parsed.scheme).from_url(
        parsed, {**options, "index": index}
    )
    return store


def __getattr__(name: str) -> Any:
    # Backend classes load on first use: `import statekeeper.memory` imports no driver.
    try:
        return backend_class("store", name=name)
    except LookupError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None

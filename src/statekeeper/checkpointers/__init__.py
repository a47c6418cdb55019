"""Checkpointers: LangGraph ``BaseCheckpointSaver`` implementations chosen by URL.

>>> from statekeeper.checkpointers import open_checkpointer
>>> with open_checkpointer("memory://") as saver:
...     saver.get_tuple({"configurable": {"thread_id": "nobody"}}) is None
True

Every backend serves both the sync and the async API from one object, is a context
manager, and has ``close()``. Backends are imported lazily, so an optional driver (such as
``redis``) is imported only when its scheme is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from statekeeper.checkpointers.base import Checkpointer, TaskWrite
from statekeeper.urls import backend_class, parse_url, schemes

if TYPE_CHECKING:
    from statekeeper.backends.file.checkpointer import FileCheckpointer
    from statekeeper.backends.redis.checkpointer import RedisCheckpointer
    from statekeeper.backends.sqlite.checkpointer import SqliteCheckpointer

__all__ = [
    "Checkpointer",
    "FileCheckpointer",
    "RedisCheckpointer",
    "SqliteCheckpointer",
    "TaskWrite",
    "known_schemes",
    "open_checkpointer",
]


def known_schemes() -> list[str]:
    """The URL schemes :func:`open_checkpointer` accepts, e.g. ``["memory", "sqlite"]``."""
    return schemes("checkpointer")


def open_checkpointer(url: str, **options: Any) -> Checkpointer:
    """Open the checkpointer that ``url`` names.

    Schemes:

    * ``memory://`` — in this process only (SQLite in memory: same semantics as files).
    * ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db`` — the embedded default.
    * ``file:///absolute/dir``, ``file://./relative/dir`` — plain files, one folder per
      thread (options ``compress``, ``on_corrupt``, ``lock_timeout``; POSIX only).
    * ``redis://host:port/db``, ``rediss://...`` (TLS), ``redis+cluster://host:port`` — Redis
      or Valkey (options ``prefix``, ``ttl``, ``refresh_on_read``...; needs
      ``pip install 'statekeeper[redis]'``).

    ``options`` are passed to the backend's constructor (for SQLite: ``busy_timeout``,
    ``serde``, ``compress``); URL query parameters (``?busy_timeout=5``) set the same
    options, and keyword arguments win.

    Raises:
        ConfigurationError: the URL is malformed, its scheme is unknown (the message lists
            the known ones), or an option is unknown or invalid.
        StorageError: the storage cannot be opened.
    """
    parsed = parse_url(url, known_schemes())
    opened: Checkpointer = backend_class("checkpointer", scheme=parsed.scheme).from_url(
        parsed, options
    )
    return opened


def __getattr__(name: str) -> Any:
    # Backend classes load on first use: `import statekeeper.checkpointers` imports no driver.
    try:
        return backend_class("checkpointer", name=name)
    except LookupError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None

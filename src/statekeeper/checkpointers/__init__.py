"""Checkpointers: LangGraph ``BaseCheckpointSaver`` implementations chosen by URL.

>>> from statekeeper.checkpointers import open_checkpointer
>>> with open_checkpointer("sqlite:///.statekeeper/state.db") as saver:  # doctest: +SKIP
...     graph = builder.compile(checkpointer=saver)

Every backend serves both the sync and the async API from one object, is a context
manager, and has ``close()``. Backends are imported lazily, so an optional driver (such as
``redis``) is imported only when its scheme is used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from statekeeper._urls import StorageURL, parse_url
from statekeeper.errors import ConfigurationError

if TYPE_CHECKING:
    from statekeeper.checkpointers.file import FileCheckpointer
    from statekeeper.checkpointers.redis import RedisCheckpointer
    from statekeeper.checkpointers.sqlite import SqliteCheckpointer

__all__ = [
    "FileCheckpointer",
    "RedisCheckpointer",
    "SqliteCheckpointer",
    "known_schemes",
    "open_checkpointer",
]


def _open_memory(url: StorageURL, options: dict[str, Any]) -> SqliteCheckpointer:
    from statekeeper.checkpointers.sqlite import SqliteCheckpointer

    if url.netloc or url.path not in ("", "/"):
        raise ConfigurationError(
            f"memory:// takes no host or path, got {url.raw!r}; write just 'memory://'"
        )
    return SqliteCheckpointer.from_url_options(":memory:", url.options, options)


def _open_sqlite(url: StorageURL, options: dict[str, Any]) -> SqliteCheckpointer:
    from statekeeper.checkpointers.sqlite import SqliteCheckpointer

    if url.netloc:
        raise ConfigurationError(
            f"sqlite URLs have no host: {url.raw!r}; write sqlite:///relative/path.db "
            "or sqlite:////absolute/path.db"
        )
    # sqlite:///state.db -> "state.db" (relative); sqlite:////var/state.db -> "/var/state.db"
    path = url.path[1:] if url.path.startswith("/") else url.path
    if not path:
        raise ConfigurationError(
            f"sqlite URL {url.raw!r} names no file; write sqlite:///path/to/file.db "
            "(or memory:// for a database that lives only in this process)"
        )
    return SqliteCheckpointer.from_url_options(path, url.options, options)


def _open_file(url: StorageURL, options: dict[str, Any]) -> FileCheckpointer:
    from statekeeper.checkpointers.file import FileCheckpointer

    forms = "write file:///absolute/dir or file://./relative/dir"
    if url.netloc not in ("", "."):
        raise ConfigurationError(f"file URLs have no host: {url.raw!r}; {forms}")
    # file:///var/state -> "/var/state"; file://./state -> "./state" (relative to the cwd)
    path = "." + url.path if url.netloc == "." else url.path
    if path in ("", "/"):
        raise ConfigurationError(f"file URL {url.raw!r} names no directory; {forms}")
    return FileCheckpointer.from_url_options(path, url.options, options)


def _open_redis(url: StorageURL, options: dict[str, Any]) -> RedisCheckpointer:
    # Importing the module imports redis; without it, a ConfigurationError says what to install.
    from statekeeper.checkpointers.redis import RedisCheckpointer

    return RedisCheckpointer.from_url_options(url, options)


# scheme -> opener: one entry per URL scheme; each imports its backend on first use.
_OPENERS: dict[str, Callable[[StorageURL, dict[str, Any]], Any]] = {
    "memory": _open_memory,
    "sqlite": _open_sqlite,
    "file": _open_file,
    "redis": _open_redis,
    "rediss": _open_redis,
    "redis+cluster": _open_redis,
    "rediss+cluster": _open_redis,
}


def known_schemes() -> list[str]:
    """The URL schemes :func:`open_checkpointer` accepts, e.g. ``["memory", "sqlite"]``."""
    return list(_OPENERS)


def open_checkpointer(url: str, **options: Any) -> Any:
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
    return _OPENERS[parsed.scheme](parsed, options)


def __getattr__(name: str) -> Any:
    # Lazy class exports keep `import statekeeper.checkpointers` free of backend imports.
    if name == "SqliteCheckpointer":
        from statekeeper.checkpointers.sqlite import SqliteCheckpointer

        return SqliteCheckpointer
    if name == "FileCheckpointer":
        from statekeeper.checkpointers.file import FileCheckpointer

        return FileCheckpointer
    if name == "RedisCheckpointer":
        from statekeeper.checkpointers.redis import RedisCheckpointer

        return RedisCheckpointer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

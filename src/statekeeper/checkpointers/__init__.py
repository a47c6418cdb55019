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
    from statekeeper.checkpointers.sqlite import SqliteCheckpointer

__all__ = ["SqliteCheckpointer", "known_schemes", "open_checkpointer"]


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


# scheme -> opener. The file and Redis backends register here when they land.
_OPENERS: dict[str, Callable[[StorageURL, dict[str, Any]], Any]] = {
    "memory": _open_memory,
    "sqlite": _open_sqlite,
}


def known_schemes() -> list[str]:
    """The URL schemes :func:`open_checkpointer` accepts, e.g. ``["memory", "sqlite"]``."""
    return list(_OPENERS)


def open_checkpointer(url: str, **options: Any) -> Any:
    """Open the checkpointer that ``url`` names.

    Schemes:

    * ``memory://`` — in this process only (SQLite in memory: same semantics as files).
    * ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db`` — the embedded default.

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
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

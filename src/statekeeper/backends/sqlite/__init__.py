"""SQLite: the embedded default (``sqlite:///path.db``) and ``memory://``.

The checkpointer and the memory store may share one database file: each records its own
schema migrations in it (:mod:`statekeeper.backends.sqlite._database`).
"""

from __future__ import annotations

from statekeeper.backends.sqlite._database import MEMORY
from statekeeper.errors import ConfigurationError
from statekeeper.urls import StorageURL

__all__ = ["database_path"]


def database_path(url: StorageURL) -> str:
    """The database file a ``sqlite://`` URL names (``":memory:"`` for ``memory://``).

    Raises:
        ConfigurationError: the URL has a host, names no file, or is ``memory://`` with a
            host or path.
    """
    if url.scheme == "memory":
        if url.netloc or url.path not in ("", "/"):
            raise ConfigurationError(
                f"memory:// takes no host or path, got {url.raw!r}; write just 'memory://'"
            )
        return MEMORY
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
    return path

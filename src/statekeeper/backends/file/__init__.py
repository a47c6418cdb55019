"""Plain files (``file:///abs/dir``, ``file://./rel/dir``), standard library only (POSIX).

The checkpointer keeps a folder per thread and namespace with checksummed, append-only
logs (``docs/file-backend.md``); the memory store keeps one JSON file per item.
"""

from __future__ import annotations

from statekeeper.errors import ConfigurationError
from statekeeper.urls import StorageURL

__all__ = ["directory_path"]


def directory_path(url: StorageURL) -> str:
    """The directory a ``file://`` URL names: ``file:///var/state`` is ``/var/state``,
    ``file://./state`` is ``./state`` (relative to the current directory).

    Raises:
        ConfigurationError: the URL has a host other than ``.``, or names no directory.
    """
    forms = "write file:///absolute/dir or file://./relative/dir"
    if url.netloc not in ("", "."):
        raise ConfigurationError(f"file URLs have no host: {url.raw!r}; {forms}")
    path = "." + url.path if url.netloc == "." else url.path
    if path in ("", "/", "."):
        raise ConfigurationError(f"file URL {url.raw!r} names no directory; {forms}")
    return path

"""Plain files (``file:///abs/dir``, ``file://./rel/dir``), standard library only (POSIX).

The checkpointer keeps a folder per thread and namespace with checksummed, append-only
logs (``docs/file-backend.md``); the memory store keeps one JSON file per item.
"""

from __future__ import annotations

from typing import NamedTuple, TypedDict

from statekeeper.checkpointers.semantics import MODES, check_choice
from statekeeper.errors import ConfigurationError
from statekeeper.urls import StorageURL, check_option

__all__ = ["DirectoryOptions", "Opening", "directory_path", "opening"]


class DirectoryOptions(TypedDict, total=False):
    """How the checkpointer and the memory store open their directory (keywords, or the
    URL's query string): ``mode`` ``"rw"`` (default) or ``"ro"`` (read only: nothing is
    created or changed; also chosen when the directory is not writable),
    ``lock_timeout`` (seconds a writer waits for a lock, default 30) and ``fsync``
    (flush every write to disk before it counts, default true)."""

    mode: str
    lock_timeout: float
    fsync: bool


class Opening(NamedTuple):
    """:class:`DirectoryOptions`, checked, with their defaults."""

    read_only: bool
    lock_timeout: float
    fsync: bool


def opening(options: DirectoryOptions) -> Opening:
    """Check ``options`` and fill in the defaults.

    Raises:
        ConfigurationError: an unknown option, or a value out of range.
    """
    unknown = sorted(set(options) - set(DirectoryOptions.__annotations__))
    if unknown:
        known = ", ".join(DirectoryOptions.__annotations__)
        raise ConfigurationError(f"unknown option {unknown[0]!r}; known options: {known}")
    mode = check_choice("mode", options.get("mode", "rw"), MODES)
    lock_timeout = options.get("lock_timeout", 30.0)
    if isinstance(lock_timeout, bool) or not isinstance(lock_timeout, int | float):
        lock_timeout = -1  # refused below, as a negative number is
    if not 0 <= lock_timeout <= 10**9:  # longer: a lock's wait overflows (NaN: never true)
        raise ConfigurationError(
            "lock_timeout must be >= 0 seconds (finite, at most 1,000,000,000), got "
            f"{options.get('lock_timeout')!r}"
        )
    fsync = check_option("fsync", bool, options.get("fsync", True))
    return Opening(mode == "ro", float(lock_timeout), fsync)


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

"""Storage a failed ``copy`` or ``import`` created, discarded again.

:func:`find_new` looks, before the target is opened, at what of it does not exist yet;
:func:`discard_if_empty`, after a transfer failed and deleted the threads it wrote,
removes what that open created — only if it was created by this command and holds no
thread. Nothing that existed before the command is ever removed:

- SQLite: the database file and its ``-wal``, ``-shm`` and ``-journal``, then the
  folders the open created (each only if empty);
- file: the checkpoint directory, when it did not exist and holds nothing but what
  opening writes (its format marker, lock files, empty folders), then the folders above
  it the open created (each only if empty);
- Redis: the prefix's own keys (:meth:`RedisCheckpointer.forget_prefix`), when the
  prefix held no statekeeper data before;
- PostgreSQL: the checkpointer's empty tables and then the schema, when the schema did
  not exist and holds nothing else (``DROP ... RESTRICT``, in one transaction);
- anything else (memory, LangGraph's savers): nothing is removed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statekeeper.errors import StatekeeperError, StorageNotFoundError

__all__ = ["New", "discard_if_empty", "find_new"]

_REDIS = ("redis", "rediss", "redis+cluster", "rediss+cluster")
# what opening a file checkpoint directory writes, and no thread ever does
_FILE_OWN = ("statekeeper.json",)
_FILE_LOCK_DIRS = ("locks", "claims", "index")  # and what only mirrors the threads


@dataclass(frozen=True)
class New:
    """What of a target did not exist before it was opened: ``storage`` (no statekeeper
    data at all) and ``folder``, the topmost missing folder of a local path, if any."""

    storage: bool
    folder: Path | None = None


def find_new(url: str) -> New:
    """What of the statekeeper storage at ``url`` does not exist yet (read-only; never
    creates anything). A URL that sets its own ``mode``, a LangGraph saver's and an
    in-memory one count as existing: nothing of theirs is ever discarded."""
    from statekeeper.checkpointers import known_schemes, open_checkpointer
    from statekeeper.transfer import transfer_schemes
    from statekeeper.urls import parse_url

    parsed = parse_url(url, transfer_schemes())
    redis = parsed.scheme in _REDIS
    postgres = parsed.scheme in ("postgres", "postgresql")
    local = parsed.scheme in ("sqlite", "file")
    if not (redis or postgres or local) or "mode" in parsed.options:
        return New(storage=False)
    assert parsed.scheme in known_schemes()
    try:
        open_checkpointer(url, mode="ro").close()
    except StorageNotFoundError:
        pass
    except (StatekeeperError, OSError):
        return New(storage=False)  # cannot tell: never discard
    else:
        return New(storage=False)
    if redis:
        return New(storage=True)
    if postgres:
        from statekeeper.backends.postgres.checkpointer import PostgresCheckpointer

        try:  # a schema that is there (public...) is never dropped, even empty
            return New(storage=not PostgresCheckpointer.schema_exists(parsed))
        except StatekeeperError:
            return New(storage=False)
    path = Path(_local_path(parsed)).expanduser().absolute()
    if parsed.scheme == "sqlite" and path.exists():
        return New(storage=False)  # a file that is there, though not a database we read
    if parsed.scheme == "file" and path.exists():
        return New(storage=False)  # an existing folder is never removed
    missing = None
    for folder in (path, *path.parents) if parsed.scheme == "file" else path.parents:
        if folder.exists():
            break
        missing = folder
    return New(storage=True, folder=missing)


def _local_path(parsed: Any) -> str:
    from statekeeper.backends.file import directory_path
    from statekeeper.backends.sqlite import database_path

    return database_path(parsed) if parsed.scheme == "sqlite" else directory_path(parsed)


def discard_if_empty(saver: Any, new: New) -> bool:
    """Close ``saver`` and remove the storage ``new`` says this command created, if it
    holds no thread; whether anything was removed. Failing to remove is not an error:
    the transfer's own failure is what the command reports."""
    if not new.storage:
        return False
    try:
        if next(iter(saver.list(None, limit=1)), None) is not None:
            return False  # a thread is there (written meanwhile by someone else): keep
        return _discard(saver, new)
    except (StatekeeperError, OSError):
        return False


def _discard(saver: Any, new: New) -> bool:
    from statekeeper.checkpointers import (
        FileCheckpointer,
        RedisCheckpointer,
        SqliteCheckpointer,
    )

    if isinstance(saver, RedisCheckpointer):
        return saver.forget_prefix()
    if type(saver).__name__ == "PostgresCheckpointer":  # imported only when used
        dropped: bool = saver.discard_schema_if_empty()
        saver.close()
        return dropped
    if isinstance(saver, SqliteCheckpointer):
        path = Path(saver.path).absolute()
        saver.close()
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                Path(f"{path}{suffix}").unlink()
        _remove_empty_folders(path.parent, new.folder)
        return True
    if isinstance(saver, FileCheckpointer):
        root = Path(saver.path).absolute()
        saver.close()
        if new.folder is None or not _only_own_files(root):
            return False
        shutil.rmtree(root)
        _remove_empty_folders(root.parent, new.folder)
        return True
    return False


def _only_own_files(root: Path) -> bool:
    """Whether the checkpoint directory ``root`` holds nothing but what opening it and
    taking locks write: a thread, a value or any other file keeps it."""
    for folder, _, files in os.walk(root):
        here = Path(folder).relative_to(root)
        for name in files:
            if here == Path() and name in _FILE_OWN:
                continue
            if here.parts[:1] and here.parts[0] in _FILE_LOCK_DIRS:
                continue
            return False
    return True


def _remove_empty_folders(folder: Path, top: Path | None) -> None:
    """Remove ``folder`` and its parents up to ``top`` (the topmost folder this command
    created), each only while it is empty; nothing when ``top`` is ``None``."""
    if top is None or not folder.is_relative_to(top):
        return
    while True:
        try:
            folder.rmdir()  # only an empty folder: never anything in it
        except OSError:
            return
        if folder == top:
            return
        folder = folder.parent

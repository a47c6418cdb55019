"""LangGraph's own savers opened by URL (``langgraph+sqlite://``, ``langgraph+postgres://``:
:data:`statekeeper.urls.LANGGRAPH_SAVERS`), for the transfers only.

The one place that imports LangGraph's saver packages (``langgraph-checkpoint-sqlite``,
``langgraph-checkpoint-postgres``), each in its own module, imported when its scheme is
opened; a package that is not installed is named in a one-line error. Every saver opened
here reads with :class:`~statekeeper.transfer._guard.GuardedSerde` (nothing unpickled,
nothing constructed but allowed data types) and reads pending writes with their task
paths (``get_writes``), which ``CheckpointTuple.pending_writes`` leaves out.
"""

from __future__ import annotations

import importlib
from contextlib import AbstractContextManager
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from statekeeper.errors import ConfigurationError
from statekeeper.urls import LangGraphSaver, StorageURL

__all__ = ["open_langgraph_saver"]


def open_langgraph_saver(
    saver: LangGraphSaver, url: StorageURL, *, read_only: bool
) -> AbstractContextManager[BaseCheckpointSaver[Any]]:
    """LangGraph's saver ``saver`` at ``url``, as a context manager that closes its
    connection. ``read_only``: storage that does not exist is an error (nothing is created)
    and nothing is written; else its tables are created (and migrated) as LangGraph does.

    Raises:
        ConfigurationError: its package is not installed (the message names it), or the
            URL is malformed.
        StorageNotFoundError: ``read_only`` and there is no such database, or it holds
            no tables of that saver.
        StorageError: the database cannot be opened or read.
    """
    try:
        module = importlib.import_module(f"{__name__}.{saver.name}")
    except ImportError as exc:
        missing = (exc.name or "").split(".")[0]
        if exc.name is None or not (exc.name.startswith("langgraph") or missing == "psycopg"):
            raise
        package, install = saver.package, saver.package
        if missing == "psycopg":
            package, install = "psycopg", "'psycopg[binary]'"
        raise ConfigurationError(
            f"{', '.join(s + '://' for s in saver.schemes)} URLs need the {package} "
            f"package: pip install {install}"
        ) from exc
    opened: AbstractContextManager[BaseCheckpointSaver[Any]] = module.open_saver(
        url, read_only=read_only
    )
    return opened

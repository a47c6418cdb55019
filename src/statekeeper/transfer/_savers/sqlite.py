"""``langgraph+sqlite:///path.db``: LangGraph's ``SqliteSaver`` on a database file.

The path is written as for ``sqlite://`` (``langgraph+sqlite:///relative.db``,
``langgraph+sqlite:////absolute.db``). Opened read-only, the file is opened with SQLite's
``mode=ro``: a missing file or one without LangGraph's ``checkpoints`` table is
:class:`StorageNotFoundError`, and nothing is created or migrated.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import writes_sort_key
from langgraph.checkpoint.sqlite import SqliteSaver

from statekeeper.checkpointers.base import TaskWrite
from statekeeper.errors import ConfigurationError, StorageError, StorageNotFoundError
from statekeeper.transfer._guard import GuardedSerde
from statekeeper.urls import StorageURL, redact

__all__ = ["open_saver"]

_THREADS = "SELECT thread_id FROM checkpoints GROUP BY thread_id ORDER BY max(checkpoint_id) DESC"
_WRITES = (
    "SELECT task_id, {task_path}, idx, channel, type, value FROM writes "
    "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
)


class _Saver(SqliteSaver):
    """``SqliteSaver`` that also lists its threads and reads pending writes with their
    task paths."""

    def thread_ids(self) -> list[str]:
        """Every thread, the most recently written first (as ``threads.list_threads``
        orders them), from the ids alone: nothing is decoded."""
        self.setup()
        with self.cursor(transaction=False) as cur:
            rows = cur.execute(_THREADS).fetchall()
        return [row[0] for row in rows]

    def get_writes(self, config: RunnableConfig) -> list[TaskWrite]:
        """The writes of the checkpoint ``config`` names, in ``writes_sort_key`` order
        (as ``get_tuple`` returns them), each with its task path."""
        self.setup()
        configurable = config["configurable"]
        sql = _WRITES.format(task_path="task_path" if self._has_task_path else "''")
        key = (
            configurable["thread_id"],
            configurable.get("checkpoint_ns", ""),
            configurable["checkpoint_id"],
        )
        with self.cursor(transaction=False) as cur:
            rows = cur.execute(sql, key).fetchall()
        rows.sort(key=lambda r: writes_sort_key(r[1], r[0], r[2]))
        return [
            TaskWrite(task_id, task_path, channel, self.serde.loads_typed((type_, value)))
            for task_id, task_path, _, channel, type_, value in rows
        ]


def open_saver(url: StorageURL, *, read_only: bool) -> contextlib.AbstractContextManager[Any]:
    return _opened(_path(url), url, read_only=read_only)


@contextlib.contextmanager
def _opened(path: str, url: StorageURL, *, read_only: bool) -> Iterator[_Saver]:
    try:
        if read_only:
            if not Path(path).is_file():
                raise StorageNotFoundError(
                    f"no database at {redact(url.raw)} (nothing was created)"
                )
            conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, check_same_thread=False)
        else:
            conn = sqlite3.connect(path, check_same_thread=False)
    except sqlite3.Error as exc:
        raise StorageError(f"cannot open {redact(url.raw)}: {exc}") from exc
    try:
        saver = _Saver(conn, serde=GuardedSerde())
        if read_only:  # LangGraph's setup() would write (WAL mode, tables, a migration)
            saver._has_task_path = _check_tables(conn, url)
            saver.is_setup = True
        else:
            saver.setup()
        yield saver
    except sqlite3.Error as exc:
        raise StorageError(f"{redact(url.raw)}: {exc}") from exc
    finally:
        conn.close()


def _check_tables(conn: sqlite3.Connection, url: StorageURL) -> bool:
    """Refuse a database without LangGraph's tables; whether its writes have task paths
    (databases of LangGraph's savers before 3.0 do not)."""
    names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if not {"checkpoints", "writes"} <= names:
        raise StorageNotFoundError(
            f"{redact(url.raw)} holds no LangGraph SqliteSaver tables (checkpoints, writes); "
            "is it the right file?"
        )
    return any(row[1] == "task_path" for row in conn.execute("PRAGMA table_info(writes)"))


def _path(url: StorageURL) -> str:
    if url.netloc:
        raise ConfigurationError(
            f"{url.scheme} URLs have no host: {url.raw!r}; write {url.scheme}:///relative.db "
            f"or {url.scheme}:////absolute/path.db"
        )
    if url.options:
        raise ConfigurationError(
            f"{url.scheme} URLs take no options, got {', '.join(url.options)} in {url.raw!r}"
        )
    path = url.path[1:] if url.path.startswith("/") else url.path
    if not path:
        raise ConfigurationError(
            f"{url.raw!r} names no file; write {url.scheme}:///path/to/file.db"
        )
    return path

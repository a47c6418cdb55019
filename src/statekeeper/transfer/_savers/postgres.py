"""``langgraph+postgres://user@host:5432/db``: LangGraph's ``PostgresSaver``.

Everything after the scheme is the libpq connection URL (``sslmode``, ``application_name``,
``connect_timeout``, ``options``... pass through), except ``schema=NAME``, which puts
LangGraph's tables in that schema (``search_path``; created when written to). Opened
read-only, the session is read-only (``default_transaction_read_only``) and LangGraph's
tables must be there, fully migrated: nothing is created or migrated.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import writes_sort_key
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row

from statekeeper.checkpointers.base import TaskWrite
from statekeeper.errors import ConfigurationError, StorageError, StorageNotFoundError
from statekeeper.transfer._guard import GuardedSerde
from statekeeper.urls import StorageURL, redact

__all__ = ["open_saver"]

_SCHEMA = re.compile(r"[A-Za-z_][A-Za-z0-9_$]{0,62}")
_THREADS = (  # ids compared by code point, as Python compares them
    "SELECT thread_id FROM checkpoints GROUP BY thread_id "
    'ORDER BY max(checkpoint_id COLLATE "C") DESC'
)
_WRITES = (
    "SELECT task_id, task_path, idx, channel, type, blob FROM checkpoint_writes "
    "WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s"
)


class _Saver(PostgresSaver):
    """``PostgresSaver`` that also lists its threads and reads pending writes with their
    task paths."""

    def thread_ids(self) -> list[str]:
        """Every thread, the most recently written first (as ``threads.list_threads``
        orders them), from the ids alone: nothing is decoded."""
        with self._cursor() as cur:
            return [row["thread_id"] for row in cur.execute(_THREADS).fetchall()]

    def get_writes(self, config: RunnableConfig) -> list[TaskWrite]:
        """The writes of the checkpoint ``config`` names, in ``writes_sort_key`` order
        (as ``get_tuple`` returns them), each with its task path."""
        configurable = config["configurable"]
        key = (
            configurable["thread_id"],
            configurable.get("checkpoint_ns", ""),
            configurable["checkpoint_id"],
        )
        with self._cursor() as cur:
            rows = cur.execute(_WRITES, key).fetchall()
        rows.sort(key=lambda r: writes_sort_key(r["task_path"], r["task_id"], r["idx"]))
        return [
            TaskWrite(
                r["task_id"],
                r["task_path"],
                r["channel"],
                self.serde.loads_typed((r["type"], r["blob"])),
            )
            for r in rows
        ]


def open_saver(url: StorageURL, *, read_only: bool) -> contextlib.AbstractContextManager[Any]:
    info, schema = conninfo(url, read_only=read_only)  # a bad URL fails here, not on entry
    return _opened(url, info, schema, read_only=read_only)


def conninfo(url: StorageURL, *, read_only: bool) -> tuple[str, str | None]:
    """The libpq connection string ``url`` means, and its ``schema`` option."""
    parts = urlsplit(url.raw)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = next((value for key, value in query if key == "schema"), None)
    if schema is not None and not _SCHEMA.fullmatch(schema):
        raise ConfigurationError(
            f"schema must be a plain SQL name (letters, digits, _ and $), got {schema!r}"
        )
    rest = urlencode([(key, value) for key, value in query if key != "schema"])
    base = urlunsplit(("postgresql", parts.netloc, parts.path, rest, ""))
    try:
        options = conninfo_to_dict(base).get("options") or ""
    except psycopg.ProgrammingError as exc:
        raise ConfigurationError(f"malformed PostgreSQL URL {redact(url.raw)!r}: {exc}") from None
    extra = [f"-c search_path={schema}"] if schema else []
    if read_only:
        extra.append("-c default_transaction_read_only=on")
    if extra:
        return make_conninfo(base, options=" ".join([str(options), *extra]).strip()), schema
    return base, schema


@contextlib.contextmanager
def _opened(url: StorageURL, info: str, schema: str | None, *, read_only: bool) -> Iterator[_Saver]:
    try:
        conn = psycopg.Connection.connect(
            info, autocommit=True, prepare_threshold=0, row_factory=dict_row
        )
    except psycopg.Error as exc:
        raise StorageError(f"cannot connect to {redact(url.raw)}: {exc}".strip()) from exc
    try:
        saver = _Saver(conn, serde=GuardedSerde())
        if read_only:
            _check_tables(saver, url)
        else:
            if schema is not None:
                conn.execute(
                    sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema))
                )
            saver.setup()
        yield saver
    except psycopg.Error as exc:
        raise StorageError(f"{redact(url.raw)}: {exc}".strip()) from exc
    finally:
        conn.close()


def _check_tables(saver: _Saver, url: StorageURL) -> None:
    """Refuse a database without LangGraph's tables, or with tables of an older
    PostgresSaver (migrating them is a write)."""
    try:
        with saver._cursor() as cur:
            row = cur.execute("SELECT max(v) AS v FROM checkpoint_migrations").fetchone()
    except psycopg.errors.UndefinedTable:
        raise StorageNotFoundError(
            f"{redact(url.raw)} holds no LangGraph PostgresSaver tables (checkpoints...) in "
            "its search_path; is it the right database (or schema=)?"
        ) from None
    latest = len(saver.MIGRATIONS) - 1
    if row is None or row["v"] is None or row["v"] < latest:
        raise StorageError(
            f"the PostgresSaver tables at {redact(url.raw)} are at migration "
            f"{None if row is None else row['v']} of {latest}; migrate them with LangGraph's "
            "PostgresSaver.setup() first"
        )

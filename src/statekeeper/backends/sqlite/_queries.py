"""The SQLite checkpointer's schema and the queries too long to read inline.

Every statement here is a constant with ``?`` placeholders: ids, metadata keys and filter
values only ever travel as parameters.

Tables (see ``MIGRATIONS``):

* ``checkpoints`` — one row per checkpoint: the checkpoint without its channel values
  (through ``serde``), metadata as canonical JSON (for filtering), the channel versions as
  JSON (to find values without deserialising), the parent id and the run id.
* ``blobs`` — each channel value once per (thread, namespace, channel, version).
* ``writes`` — pending writes per checkpoint, task and index, with their ``task_path``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig

from statekeeper._storage.lineage import keep_latest_ids, unused_values, walk_chains
from statekeeper._storage.payload import EMPTY
from statekeeper.backends.sqlite._database import Migration
from statekeeper.checkpointers.semantics import before_id, list_scope

Row = tuple[Any, ...]
Rows = list[Row]
# A checkpoint row with its value rows and write rows, read in one transaction and
# decoded after it (so deserialisation never holds the database lock).
Raw = tuple[Row, Rows, Rows]
Raws = list[Raw]

MIGRATIONS = (
    Migration(
        1,
        "checkpoints, channel values and pending writes",
        (
            """CREATE TABLE checkpoints (
                thread_id TEXT NOT NULL,
                checkpoint_ns TEXT NOT NULL,
                checkpoint_id TEXT NOT NULL,
                parent_checkpoint_id TEXT,
                run_id TEXT,
                type TEXT NOT NULL,
                codec TEXT NOT NULL,
                checkpoint BLOB NOT NULL,
                metadata TEXT NOT NULL,
                channel_versions TEXT NOT NULL,
                PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id))""",
            """CREATE TABLE blobs (
                thread_id TEXT NOT NULL,
                checkpoint_ns TEXT NOT NULL,
                channel TEXT NOT NULL,
                version TEXT NOT NULL,
                type TEXT NOT NULL,
                codec TEXT NOT NULL,
                blob BLOB NOT NULL,
                PRIMARY KEY (thread_id, checkpoint_ns, channel, version))""",
            """CREATE TABLE writes (
                thread_id TEXT NOT NULL,
                checkpoint_ns TEXT NOT NULL,
                checkpoint_id TEXT NOT NULL,
                task_id TEXT NOT NULL,
                idx INTEGER NOT NULL,
                channel TEXT NOT NULL,
                task_path TEXT NOT NULL,
                type TEXT NOT NULL,
                codec TEXT NOT NULL,
                value BLOB NOT NULL,
                PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx))""",
        ),
    ),
    Migration(
        2,
        "indexes for newest-first listing and deletion by run",
        (
            "CREATE INDEX checkpoints_newest ON checkpoints (checkpoint_id)",
            "CREATE INDEX checkpoints_thread_newest ON checkpoints (thread_id, checkpoint_id)",
            "CREATE INDEX checkpoints_run ON checkpoints (run_id) WHERE run_id IS NOT NULL",
        ),
    ),
    Migration(
        3,
        "append deltas: a value may be stored as bytes added to a base version; checksums",
        (
            "ALTER TABLE blobs ADD COLUMN base_version TEXT",
            "ALTER TABLE blobs ADD COLUMN crc INTEGER",
        ),
    ),
)

SELECT_CHECKPOINTS = (
    "SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, codec,"
    " checkpoint, metadata, channel_versions FROM checkpoints"
)
# Values of one checkpoint: its channel -> version map joined to the blobs table.
SELECT_VALUES = (
    "SELECT b.channel, b.version, b.type, b.codec, b.blob, b.base_version, b.crc"
    " FROM json_each(?) AS v CROSS JOIN blobs AS b ON b.thread_id = ?"
    " AND b.checkpoint_ns = ? AND b.channel = v.key AND b.version = v.value"
)
SELECT_VALUE = (
    "SELECT channel, version, type, codec, blob, base_version, crc FROM blobs"
    " WHERE thread_id = ? AND checkpoint_ns = ? AND channel = ? AND version = ?"
)
SELECT_CRC = (
    "SELECT crc FROM blobs"
    " WHERE thread_id = ? AND checkpoint_ns = ? AND channel = ? AND version = ?"
)
_VALUE_ROW = (
    " INTO blobs (thread_id, checkpoint_ns, channel, version, type, codec, blob,"
    " base_version, crc) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_VALUE = "INSERT OR IGNORE" + _VALUE_ROW  # a new version: the common case
REPLACE_VALUE = "INSERT OR REPLACE" + _VALUE_ROW  # an overwrite of a stored version
SELECT_WRITES = (
    "SELECT task_id, channel, type, codec, value, task_path, idx FROM writes"
    " WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
)
INSERT_WRITE = "INTO writes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"


# Columns copied by copy_thread after the (replaced) thread_id column, in table order.
COPY_COLUMNS = {
    "checkpoints": "checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, type, codec,"
    " checkpoint, metadata, channel_versions",
    "blobs": "checkpoint_ns, channel, version, type, codec, blob, base_version, crc",
    "writes": "checkpoint_ns, checkpoint_id, task_id, idx, channel, task_path, type, codec, value",
}


def list_where(
    config: RunnableConfig | None,
    filter: dict[str, Any] | None,
    before: RunnableConfig | None,
) -> tuple[list[str], list[Any]]:
    """SQL conditions (all parameterised) that narrow a listing. Metadata filters on
    scalars are pushed down; ``matches`` re-checks every row exactly afterwards."""
    where: list[str] = []
    params: list[Any] = []
    thread_id, ns, checkpoint_id = list_scope(config)
    below = before_id(before)
    for column, value in (
        ("thread_id = ?", thread_id),
        ("checkpoint_ns = ?", ns),
        ("checkpoint_id = ?", checkpoint_id),
        ("checkpoint_id < ?", below),
    ):
        if value is not None:
            where.append(column)
            params.append(value)
    for key, value in (filter or {}).items():
        condition = pushdown(key, value)
        if condition is not None:
            where.append(condition[0])
            params.extend(condition[1])
    return where, params


def pushdown(key: str, value: Any) -> tuple[str, tuple[Any, ...]] | None:
    exists = "EXISTS (SELECT 1 FROM json_each(metadata) WHERE key = ? AND {})"
    try:
        key.encode("utf-8")
        if isinstance(value, str):
            value.encode("utf-8")
    except (AttributeError, UnicodeEncodeError):
        return None  # not bindable: left to the exact check in Python
    if isinstance(value, bool):
        return exists.format("type = ?"), (key, "true" if value else "false")
    if isinstance(value, int | float):
        return exists.format("type IN ('integer', 'real') AND atom = ?"), (key, value)
    if isinstance(value, str):
        return exists.format("type = 'text' AND atom = ?"), (key, value)
    return None


def delete_checkpoints(conn: sqlite3.Connection, keys: Sequence[Row]) -> None:
    """Delete these (thread, namespace, checkpoint id)s with their writes, then the values
    that no remaining checkpoint of their namespaces uses."""
    conn.executemany(
        "DELETE FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?",
        keys,
    )
    conn.executemany(
        "DELETE FROM writes WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?",
        keys,
    )
    for thread_id, ns in {(key[0], key[1]) for key in keys}:
        referenced = (
            json.loads(versions)
            for (versions,) in conn.execute(
                "SELECT channel_versions FROM checkpoints"
                " WHERE thread_id = ? AND checkpoint_ns = ?",
                (thread_id, ns),
            )
        )
        stored = conn.execute(
            "SELECT channel, version, base_version FROM blobs"
            " WHERE thread_id = ? AND checkpoint_ns = ?",
            (thread_id, ns),
        ).fetchall()
        conn.executemany(
            "DELETE FROM blobs WHERE thread_id = ? AND checkpoint_ns = ? AND channel = ?"
            " AND version = ?",
            [
                (thread_id, ns, ch, v)
                for ch, v in unused_values(
                    [(ch, v) for ch, v, _ in stored],
                    referenced,
                    bases={(ch, v): base for ch, v, base in stored if base is not None},
                )
            ],
        )


def keep_latest(conn: sqlite3.Connection, thread_id: str, ns: str) -> None:
    newest = conn.execute(
        "SELECT checkpoint_id, metadata FROM checkpoints WHERE thread_id = ? AND"
        " checkpoint_ns = ? ORDER BY checkpoint_id DESC LIMIT 1",
        (thread_id, ns),
    ).fetchone()
    if newest is None:
        return
    keep = keep_latest_ids(
        newest[0],
        json.loads(newest[1]),
        lambda channels: walk_ancestors(conn, thread_id, ns, newest[0], channels)[0],
    )
    doomed = [
        (thread_id, ns, checkpoint_id)
        for (checkpoint_id,) in conn.execute(
            "SELECT checkpoint_id FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ?",
            (thread_id, ns),
        ).fetchall()
        if checkpoint_id not in keep
    ]
    delete_checkpoints(conn, doomed)


def walk_ancestors(
    conn: sqlite3.Connection, thread_id: str, ns: str, checkpoint_id: str, channels: Sequence[str]
) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Follow parent links from ``checkpoint_id`` (exclusive), nearest first. Per channel,
    return the ancestors visited until one holds a value for it (inclusive), and that
    value's version, the seed. One recursive query, read lazily."""
    holding = {
        (channel, version)
        for channel, version in conn.execute(
            "SELECT channel, version FROM blobs WHERE thread_id = ? AND checkpoint_ns = ?"
            " AND type != ? AND channel IN (SELECT value FROM json_each(?))",
            (thread_id, ns, EMPTY[0], json.dumps(list(channels))),
        )
    }
    cursor = conn.execute(
        "WITH RECURSIVE chain(checkpoint_id, parent_checkpoint_id, channel_versions) AS ("
        " SELECT checkpoint_id, parent_checkpoint_id, channel_versions FROM checkpoints"
        "  WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
        " UNION ALL"
        " SELECT c.checkpoint_id, c.parent_checkpoint_id, c.channel_versions"
        "  FROM chain CROSS JOIN checkpoints AS c ON c.thread_id = ? AND c.checkpoint_ns = ?"
        "  AND c.checkpoint_id = chain.parent_checkpoint_id)"
        " SELECT checkpoint_id, channel_versions FROM chain",
        (thread_id, ns, checkpoint_id, thread_id, ns),
    )
    next(cursor, None)  # the target itself: its writes are not history yet
    chains, seed_versions = walk_chains(
        checkpoint_id,
        ((ancestor, json.loads(versions)) for ancestor, versions in cursor),
        channels,
        lambda ch, version: (ch, version) in holding,
    )
    cursor.close()
    return chains, seed_versions

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

import itertools
import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig

from statekeeper._sqlite import Migration
from statekeeper.checkpointers._common import location
from statekeeper.checkpointers._payload import EMPTY, check_id

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
)

SELECT_CHECKPOINTS = (
    "SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, codec,"
    " checkpoint, metadata, channel_versions FROM checkpoints"
)
# Values of one checkpoint: its channel -> version map joined to the blobs table.
SELECT_VALUES = (
    "SELECT b.channel, b.type, b.codec, b.blob FROM json_each(?) AS v CROSS JOIN blobs AS b"
    " ON b.thread_id = ? AND b.checkpoint_ns = ? AND b.channel = v.key AND b.version = v.value"
)
SELECT_WRITES = (
    "SELECT task_id, channel, type, codec, value, task_path, idx FROM writes"
    " WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
)
INSERT_WRITE = "INTO writes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"


# Columns copied by copy_thread after the (replaced) thread_id column, in table order.
COPY_COLUMNS = {
    "checkpoints": "checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, type, codec,"
    " checkpoint, metadata, channel_versions",
    "blobs": "checkpoint_ns, channel, version, type, codec, blob",
    "writes": "checkpoint_ns, checkpoint_id, task_id, idx, channel, task_path, type, codec, value",
}


def version_key(version: str | int | float) -> str:
    # JSON keeps 1, 1.0 and "1" apart, so versions of any type map to distinct keys.
    return json.dumps(version)


def list_where(
    config: RunnableConfig | None,
    filter: dict[str, Any] | None,
    before: RunnableConfig | None,
) -> tuple[list[str], list[Any]]:
    """SQL conditions (all parameterised) that narrow a listing. Metadata filters on
    scalars are pushed down; ``matches`` re-checks every row exactly afterwards."""
    where: list[str] = []
    params: list[Any] = []
    if config is not None:
        thread_id, _, checkpoint_id = location(config)
        where.append("thread_id = ?")
        params.append(thread_id)
        ns = config["configurable"].get("checkpoint_ns")
        if ns is not None:
            where.append("checkpoint_ns = ?")
            params.append(check_id(ns, "checkpoint_ns", allow_empty=True))
        if checkpoint_id is not None:
            where.append("checkpoint_id = ?")
            params.append(checkpoint_id)
    if before is not None:
        _, _, before_id = location({"configurable": {"thread_id": "-", **before["configurable"]}})
        if before_id is not None:
            where.append("checkpoint_id < ?")
            params.append(before_id)
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
        used = {
            (channel, version)
            for (versions,) in conn.execute(
                "SELECT channel_versions FROM checkpoints"
                " WHERE thread_id = ? AND checkpoint_ns = ?",
                (thread_id, ns),
            )
            for channel, version in json.loads(versions).items()
        }
        stored = conn.execute(
            "SELECT channel, version FROM blobs WHERE thread_id = ? AND checkpoint_ns = ?",
            (thread_id, ns),
        ).fetchall()
        conn.executemany(
            "DELETE FROM blobs WHERE thread_id = ? AND checkpoint_ns = ? AND channel = ?"
            " AND version = ?",
            [(thread_id, ns, ch, v) for ch, v in stored if (ch, v) not in used],
        )


def keep_latest(conn: sqlite3.Connection, thread_id: str, ns: str) -> None:
    newest = conn.execute(
        "SELECT checkpoint_id, metadata FROM checkpoints WHERE thread_id = ? AND"
        " checkpoint_ns = ? ORDER BY checkpoint_id DESC LIMIT 1",
        (thread_id, ns),
    ).fetchone()
    if newest is None:
        return
    keep = {newest[0]}
    # LangGraph records its DeltaChannels here; their values are rebuilt from ancestors.
    delta_channels = list(json.loads(newest[1]).get("counters_since_delta_snapshot") or {})
    if delta_channels:
        chains, _ = walk_ancestors(conn, thread_id, ns, newest[0], delta_channels)
        keep.update(itertools.chain.from_iterable(chains.values()))
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
) -> tuple[dict[str, list[str]], dict[str, Row]]:
    """Follow parent links from ``checkpoint_id`` (exclusive), nearest first. Per channel,
    return the ancestors visited until one holds a value for it (inclusive), and that
    value's ``(type, codec, bytes)`` row as the seed. One recursive query, read lazily."""
    holding = {
        (channel, version)
        for channel, version in conn.execute(
            "SELECT channel, version FROM blobs WHERE thread_id = ? AND checkpoint_ns = ?"
            " AND type != ? AND channel IN (SELECT value FROM json_each(?))",
            (thread_id, ns, EMPTY[0], json.dumps(list(channels))),
        )
    }
    chains: dict[str, list[str]] = {ch: [] for ch in channels}
    seed_versions: dict[str, str] = {}
    remaining = set(channels)
    visited = {checkpoint_id}
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
    for ancestor, versions_json in cursor:
        if ancestor in visited or not remaining:
            break  # a re-put checkpoint can make a cycle; stop rather than loop
        visited.add(ancestor)
        versions = json.loads(versions_json)
        for ch in list(remaining):
            chains[ch].append(ancestor)
            if (ch, versions.get(ch)) in holding:
                seed_versions[ch] = versions[ch]
                remaining.discard(ch)
    cursor.close()
    seeds = {
        ch: conn.execute(
            "SELECT type, codec, blob FROM blobs WHERE thread_id = ? AND checkpoint_ns = ?"
            " AND channel = ? AND version = ?",
            (thread_id, ns, ch, version),
        ).fetchone()
        for ch, version in seed_versions.items()
    }
    return chains, seeds

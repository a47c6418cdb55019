"""The SQLite checkpointer's schema, its row shapes and the queries too long to read inline.

Every statement here is a constant with ``?`` placeholders: ids, metadata keys and filter
values only ever travel as parameters. The one exception is the key of a declared
metadata index (``index_metadata``), checked to be a plain name (letters, digits, ``_``),
which names the index and spells its JSON path.

Tables (see ``MIGRATIONS``; what each checksum covers: :mod:`._integrity`):

* ``checkpoints`` — one row per checkpoint: the checkpoint without its channel values
  (through ``serde``), metadata as canonical JSON (for filtering), the channel versions as
  JSON (to find values without deserialising), the parent id and the run id; its
  checksums, how many of its values were stored when it was, and the count and checksum
  sum of its pending writes.
* ``blobs`` — each channel value once per (thread, namespace, channel, version).
* ``writes`` — pending writes per checkpoint, task and index, with their ``task_path``.
* ``heads`` — per (thread, namespace): the newest checkpoint id and how many there are;
  its root-namespace rows, indexed by (newest id, thread id), are the thread index
  (``Checkpointer.thread_heads``), kept in the transaction of every write.
* ``checkpoint_integrity`` — ``legacy_rows``: how many rows were written before checksums.

And ``checkpoints_meta_<key>``: an index of one top-level metadata key's value (declared
with ``index_metadata``), so a listing filtered on it reads a page, not the table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from langchain_core.runnables import RunnableConfig

from statekeeper.backends.sqlite._database import Migration
from statekeeper.checkpointers.semantics import before_id, list_scope

Row = tuple[Any, ...]
Rows = list[Row]


class CheckpointRow(NamedTuple):
    """A ``checkpoints`` row as :data:`SELECT_CHECKPOINTS` reads it. Types are what
    SQLite returned: a damaged row can hold anything until its checksums are verified."""

    thread_id: Any
    checkpoint_ns: Any
    checkpoint_id: Any
    parent_id: Any
    run_id: Any
    type: Any
    codec: Any
    checkpoint: Any
    metadata: Any
    channel_versions: Any
    values_count: Any
    crc: Any
    metadata_crc: Any
    writes_count: Any
    writes_sum: Any


# A verified checkpoint row, its values ((channel, type, full payload) of each non-empty
# one) and its write rows, read in one transaction and decoded after it (so
# deserialisation never holds the database lock).
Raw = tuple[CheckpointRow, list[tuple[str, str, bytes]], Rows]

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
    # Adding columns rewrites no row: rows written before hold NULL there (unverified
    # until verify(repair=True) checksums them). The heads are built from the rows.
    Migration(
        4,
        "a checksum on every row, each checkpoint's writes digest, heads per namespace",
        (
            "ALTER TABLE checkpoints ADD COLUMN values_count INTEGER",
            "ALTER TABLE checkpoints ADD COLUMN crc INTEGER",
            "ALTER TABLE checkpoints ADD COLUMN metadata_crc INTEGER",
            "ALTER TABLE checkpoints ADD COLUMN writes_count INTEGER",
            "ALTER TABLE checkpoints ADD COLUMN writes_sum INTEGER",
            "ALTER TABLE blobs ADD COLUMN row_crc INTEGER",
            "ALTER TABLE writes ADD COLUMN crc INTEGER",
            """CREATE TABLE heads (
                thread_id TEXT NOT NULL,
                checkpoint_ns TEXT NOT NULL,
                newest_id TEXT NOT NULL,
                checkpoint_count INTEGER NOT NULL,
                PRIMARY KEY (thread_id, checkpoint_ns))""",
            "INSERT INTO heads SELECT thread_id, checkpoint_ns, MAX(checkpoint_id), COUNT(*)"
            " FROM checkpoints GROUP BY thread_id, checkpoint_ns",
            # How many rows were written without checksums: while any are left, a row
            # without one is read unverified; in a database without any, it is damage.
            "CREATE TABLE checkpoint_integrity (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
            "INSERT INTO checkpoint_integrity SELECT 'legacy_rows', (SELECT COUNT(*) FROM"
            " checkpoints) + (SELECT COUNT(*) FROM blobs) + (SELECT COUNT(*) FROM writes)",
        ),
    ),
    # The thread index: the root-namespace heads, newest first, a page per query.
    Migration(
        5,
        "an index of the threads by their newest root checkpoint",
        ("CREATE INDEX heads_threads ON heads (newest_id, thread_id) WHERE checkpoint_ns = ''",),
    ),
)
HEADS_VERSION = 4  # the first schema with checksums and heads
LEGACY_ROWS = "SELECT value FROM checkpoint_integrity WHERE name = 'legacy_rows'"

CHECKPOINT_COLUMNS = (
    "thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, type, codec,"
    " checkpoint, metadata, channel_versions, values_count, crc, metadata_crc,"
    " writes_count, writes_sum"
)
SELECT_CHECKPOINTS = f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints"  # noqa: S608
# The newest checkpoint of a namespace, with the newest id its head record names.
SELECT_NEWEST = (
    f"SELECT {CHECKPOINT_COLUMNS}, (SELECT newest_id FROM heads"  # noqa: S608
    " WHERE thread_id = ?1 AND checkpoint_ns = ?2) FROM checkpoints"
    " WHERE thread_id = ?1 AND checkpoint_ns = ?2 ORDER BY checkpoint_id DESC LIMIT 1"
)
SELECT_ONE = SELECT_CHECKPOINTS + " WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
# A new checkpoint: its writes digest is of the writes already stored for it (usually
# none; a put_writes may come first).
INSERT_CHECKPOINT = (
    "INSERT OR IGNORE INTO checkpoints SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11,"
    " ?12, ?13, COUNT(*), COALESCE(SUM(crc), 0) FROM writes"
    " WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3"
)
# A checkpoint put again under its id (LangGraph never does): its writes stay.
UPDATE_CHECKPOINT = (
    "UPDATE checkpoints SET parent_checkpoint_id = ?4, run_id = ?5, type = ?6, codec = ?7,"
    " checkpoint = ?8, metadata = ?9, channel_versions = ?10, values_count = ?11, crc = ?12,"
    " metadata_crc = ?13 WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3"
)
# How many of the values a checkpoint names are stored (its values_count).
COUNT_VALUES = (
    "SELECT COUNT(*) FROM json_each(?1) AS v CROSS JOIN blobs AS b ON b.thread_id = ?2"
    " AND b.checkpoint_ns = ?3 AND b.channel = v.key AND b.version = v.value"
)
SELECT_HEAD = (
    "SELECT newest_id, checkpoint_count FROM heads WHERE thread_id = ? AND checkpoint_ns = ?"
)
# A page of the thread index (heads_threads), after a (newest id, thread id) or from the top.
THREAD_HEADS = (
    "SELECT thread_id, newest_id FROM heads WHERE checkpoint_ns = ''"
    " ORDER BY newest_id DESC, thread_id DESC LIMIT ?"
)
THREAD_HEADS_AFTER = (
    "SELECT thread_id, newest_id FROM heads WHERE checkpoint_ns = ''"
    " AND (newest_id, thread_id) < (?, ?) ORDER BY newest_id DESC, thread_id DESC LIMIT ?"
)
UPSERT_HEAD = (
    "INSERT INTO heads VALUES (?, ?, ?, 1) ON CONFLICT (thread_id, checkpoint_ns) DO UPDATE"
    " SET newest_id = MAX(newest_id, excluded.newest_id),"
    " checkpoint_count = checkpoint_count + 1"
)
# Values of one checkpoint: its channel -> version map joined to the blobs table, with
# the channel and version asked for (a damaged index could hand back another row).
VALUE_COLUMNS = "channel, version, type, codec, blob, base_version, crc, row_crc"
SELECT_VALUES = (
    "SELECT b.channel, b.version, b.type, b.codec, b.blob, b.base_version, b.crc, b.row_crc,"
    " v.key, v.value FROM json_each(?) AS v CROSS JOIN blobs AS b ON b.thread_id = ?"
    " AND b.checkpoint_ns = ? AND b.channel = v.key AND b.version = v.value"
)
SELECT_VALUE = (
    f"SELECT {VALUE_COLUMNS} FROM blobs"  # noqa: S608
    " WHERE thread_id = ? AND checkpoint_ns = ? AND channel = ? AND version = ?"
)
SELECT_CHANNELS = (  # every stored version of some channels (a JSON list) of a namespace
    f"SELECT {VALUE_COLUMNS} FROM blobs"  # noqa: S608
    " WHERE thread_id = ? AND checkpoint_ns = ? AND channel IN (SELECT value FROM json_each(?))"
)
SELECT_CRC = (
    "SELECT crc FROM blobs"
    " WHERE thread_id = ? AND checkpoint_ns = ? AND channel = ? AND version = ?"
)
_VALUE_ROW = (
    " INTO blobs (thread_id, checkpoint_ns, channel, version, type, codec, blob,"
    " base_version, crc, row_crc) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_VALUE = "INSERT OR IGNORE" + _VALUE_ROW  # a new version: the common case
REPLACE_VALUE = "INSERT OR REPLACE" + _VALUE_ROW  # an overwrite of a stored version
# Every column of a write row, in table order (the crc last).
WRITE_COLUMNS = (
    "thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, task_path, type, codec,"
    " value, crc"
)
SELECT_WRITES = (
    f"SELECT {WRITE_COLUMNS} FROM writes"  # noqa: S608
    " WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
)
SELECT_WRITE_CRC = (
    "SELECT crc FROM writes WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
    " AND task_id = ? AND idx = ?"
)
SELECT_WRITES_DIGEST = (
    "SELECT writes_count, writes_sum FROM checkpoints"
    " WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
)
# Every row of one namespace (thread id, namespace), per table: for verify and copy.
NAMESPACE_CHECKPOINTS = (
    f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints"  # noqa: S608
    " WHERE thread_id = ? AND checkpoint_ns = ?"
)
NAMESPACE_VALUES = f"SELECT {VALUE_COLUMNS} FROM blobs WHERE thread_id = ? AND checkpoint_ns = ?"  # noqa: S608
NAMESPACE_WRITES = f"SELECT {WRITE_COLUMNS} FROM writes WHERE thread_id = ? AND checkpoint_ns = ?"  # noqa: S608
INSERT_CHECKPOINT_ROW = (
    f"INSERT INTO checkpoints ({CHECKPOINT_COLUMNS})"  # noqa: S608
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_VALUE_ROW = (
    "INSERT INTO blobs (thread_id, checkpoint_ns, channel, version, type, codec, blob,"
    " base_version, crc, row_crc) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_WRITE = "INTO writes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
# Added to by each put_writes (never recounted, so a lost write row stays detectable);
# a checkpoint written before digests existed keeps none.
ADD_TO_WRITES_DIGEST = (
    "UPDATE checkpoints SET writes_count = writes_count + ?4, writes_sum = writes_sum + ?5"
    " WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3"
    " AND writes_count IS NOT NULL"
)


def list_where(
    config: RunnableConfig | None,
    filter: dict[str, Any] | None,
    before: RunnableConfig | None,
    indexed: frozenset[str] = frozenset(),
) -> tuple[list[str], list[Any]]:
    """SQL conditions (all parameterised) that narrow a listing. Metadata filters on
    scalars are pushed down (by the key's index when it is one of ``indexed``);
    ``matches`` re-checks every row exactly afterwards."""
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
        condition = indexed_pushdown(key, value) if key in indexed else None
        if condition is None:
            condition = pushdown(key, value)
        if condition is not None:
            where.append(condition[0])
            params.extend(condition[1])
    return where, params


_INT64 = range(-(2**63), 2**63)


def page_query(
    where: Sequence[str], params: Sequence[Any], after: Sequence[Any] | None
) -> tuple[str, list[Any]]:
    """One page of a listing: the rows ``where`` selects, newest first (checkpoint id,
    thread, namespace), below the key ``after`` when given; the page size is the last
    parameter, left to the caller."""
    clauses, args = [*where], [*params]
    if after is not None:
        clauses.append("(checkpoint_id, thread_id, checkpoint_ns) < (?, ?, ?)")
        args.extend(after)
    sql = SELECT_CHECKPOINTS + (" WHERE " + " AND ".join(clauses) if clauses else "")
    return sql + " ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC LIMIT ?", args


def pushdown(key: str, value: Any) -> tuple[str, tuple[Any, ...]] | None:
    """A condition that keeps every row whose metadata holds ``value`` at ``key`` (the
    exact check follows), or ``None`` when SQL could not tell: a key or text SQLite
    cannot bind or compare as Python does (lone surrogates; NUL, where SQLite's JSON
    text ends), an int beyond 64 bits, objects and lists."""
    exists = "EXISTS (SELECT 1 FROM json_each(metadata) WHERE key = ? AND {})"
    if not _comparable(key) or (isinstance(value, str) and not _comparable(value)):
        return None  # left to the exact check in Python
    if isinstance(value, bool):
        return exists.format("type = ?"), (key, "true" if value else "false")
    if isinstance(value, int) and value not in _INT64:
        return None
    if isinstance(value, int | float):
        return exists.format("type IN ('integer', 'real') AND atom = ?"), (key, value)
    if isinstance(value, str):
        return exists.format("type = 'text' AND atom = ?"), (key, value)
    return None


def _comparable(text: Any) -> bool:
    """Whether ``text`` is a str SQLite binds and compares as Python does."""
    if not isinstance(text, str) or "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# -- declared metadata indexes (index_metadata) ----------------------------------------

# An index on one top-level metadata key: ``metadata_index_sql(key)`` builds it, named
# METADATA_INDEX + key. The key is checked (semantics.metadata_index_keys: letters,
# digits and _), so it is spelled into the index name and the JSON path as it is; a
# query uses the index only when its expression is this very text.
METADATA_INDEX = "checkpoints_meta_"
SELECT_METADATA_INDEXES = (
    "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'checkpoints'"
    " AND name GLOB 'checkpoints_meta_*'"
)


def metadata_expression(key: str) -> str:
    return f"json_extract(metadata, '$.{key}')"


def metadata_index_sql(key: str) -> str:
    """The index of metadata ``key``: its value, then the listing order, so an equality
    on the value reads checkpoints newest first, a page at a time."""
    return (
        f"CREATE INDEX IF NOT EXISTS {METADATA_INDEX}{key} ON checkpoints"
        f" ({metadata_expression(key)}, checkpoint_id, thread_id, checkpoint_ns)"
    )


def indexed_pushdown(key: str, value: Any) -> tuple[str, tuple[Any, ...]] | None:
    """An equality on the indexed ``key`` that selects every row whose metadata holds
    ``value`` there (and maybe a few more: ``true`` and ``1`` read alike; the exact check
    follows), or ``None`` where SQL's reading of JSON could miss one (floats, which
    SQLite may parse a last digit apart; text with NUL; objects and lists)."""
    expression = metadata_expression(key)
    if value is None:  # a missing key reads as None too (semantics.matches)
        return f"{expression} IS NULL", ()
    if isinstance(value, bool):
        return f"{expression} = ?", (int(value),)
    if (isinstance(value, int) and value in _INT64) or _comparable(value):
        return f"{expression} = ?", (value,)
    return None

"""The PostgreSQL checkpointer's tables, row shapes and statements.

Every statement is a constant with ``%s`` / ``%(name)s`` placeholders: ids, metadata keys
and filter values only ever travel as parameters. Ids are stored encoded
(:func:`~statekeeper.backends.postgres.encode_id`: text cannot hold NUL), in
``COLLATE "C"`` columns, so they sort by code point as on every backend.

Tables (in the schema the URL names; what each checksum covers: :mod:`._integrity`):

* ``checkpoints`` — one row per checkpoint: the checkpoint without its channel values
  (through ``serde``), the metadata as canonical JSON text (what the checksum covers) and
  as ``jsonb`` (for filters; ``NULL`` for metadata jsonb cannot hold, such as NUL), the
  channel versions as two arrays, the parent id and the run id; its checksums, how many
  of its values were stored when it was.
* ``blobs`` — each channel value once per (thread, namespace, channel, version): whole,
  compressed, or an append delta on ``base_version``.
* ``writes`` — pending writes per checkpoint, task and index, with their ``task_path``.
* ``write_counts`` — per checkpoint: how many write rows it has and the sum of their
  checksums, added to by each ``put_writes`` (a row of its own, so writes stored before
  or while their checkpoint is count the same).
* ``heads`` — per (thread, namespace): the newest checkpoint id and how many there are.
* ``claims`` — who holds a thread's claim (the claim itself is an advisory lock).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from statekeeper.backends.postgres._database import Migration

C = 'COLLATE "C"'

MIGRATIONS = (
    Migration(
        1,
        "checkpoints, channel values, pending writes, heads and claims",
        (
            f"""CREATE TABLE checkpoints (
                thread_id text {C} NOT NULL,
                checkpoint_ns text {C} NOT NULL,
                checkpoint_id text {C} NOT NULL,
                parent_id text {C},
                run_id text {C},
                type text NOT NULL,
                codec text NOT NULL,
                checkpoint bytea NOT NULL,
                metadata text NOT NULL,
                metadata_doc jsonb,
                channels text[] {C} NOT NULL,
                versions text[] {C} NOT NULL,
                values_count integer NOT NULL,
                crc bigint NOT NULL,
                metadata_crc bigint NOT NULL,
                PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id))""",
            "CREATE INDEX checkpoints_newest"
            " ON checkpoints (checkpoint_id, thread_id, checkpoint_ns)",
            "CREATE INDEX checkpoints_thread_newest ON checkpoints (thread_id, checkpoint_id)",
            "CREATE INDEX checkpoints_run ON checkpoints (run_id) WHERE run_id IS NOT NULL",
            f"""CREATE TABLE blobs (
                thread_id text {C} NOT NULL,
                checkpoint_ns text {C} NOT NULL,
                channel text {C} NOT NULL,
                version text {C} NOT NULL,
                type text NOT NULL,
                codec text NOT NULL,
                blob bytea NOT NULL,
                base_version text {C},
                crc bigint,
                row_crc bigint NOT NULL,
                PRIMARY KEY (thread_id, checkpoint_ns, channel, version))""",
            f"""CREATE TABLE writes (
                thread_id text {C} NOT NULL,
                checkpoint_ns text {C} NOT NULL,
                checkpoint_id text {C} NOT NULL,
                task_id text {C} NOT NULL,
                idx integer NOT NULL,
                channel text {C} NOT NULL,
                task_path text {C} NOT NULL,
                type text NOT NULL,
                codec text NOT NULL,
                value bytea NOT NULL,
                crc bigint NOT NULL,
                PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx))""",
            f"""CREATE TABLE write_counts (
                thread_id text {C} NOT NULL,
                checkpoint_ns text {C} NOT NULL,
                checkpoint_id text {C} NOT NULL,
                writes_count bigint NOT NULL,
                writes_sum bigint NOT NULL,
                PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id))""",
            f"""CREATE TABLE heads (
                thread_id text {C} NOT NULL,
                checkpoint_ns text {C} NOT NULL,
                newest_id text {C} NOT NULL,
                checkpoint_count bigint NOT NULL,
                PRIMARY KEY (thread_id, checkpoint_ns))""",
            f"CREATE TABLE claims (thread_id text {C} PRIMARY KEY, holder text NOT NULL)",
        ),
    ),
    Migration(
        2,
        "the thread index: root-namespace heads, newest first",
        ("CREATE INDEX heads_threads ON heads (newest_id, thread_id) WHERE checkpoint_ns = ''",),
    ),
)
# A page of the thread index (Checkpointer.thread_heads), by heads_threads; ids as stored,
# whose order is the ids' own (encode_id preserves it; the columns are COLLATE "C").
THREAD_HEADS = (
    "SELECT thread_id, newest_id FROM heads WHERE checkpoint_ns = ''"
    " ORDER BY newest_id DESC, thread_id DESC LIMIT %s"
)
THREAD_HEADS_AFTER = (
    "SELECT thread_id, newest_id FROM heads WHERE checkpoint_ns = ''"
    " AND (newest_id, thread_id) < (%s, %s) ORDER BY newest_id DESC, thread_id DESC LIMIT %s"
)


class CheckpointRow(NamedTuple):
    """A ``checkpoints`` row as :data:`CHECKPOINT_COLUMNS` reads it (ids as stored)."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_id: str | None
    run_id: str | None
    type: str
    codec: str
    checkpoint: bytes
    metadata: str
    channels: list[str]
    versions: list[str]
    values_count: int
    crc: int
    metadata_crc: int
    writes_count: int
    writes_sum: int


N_CHECKPOINT = len(CheckpointRow._fields)
CHECKPOINT_COLUMNS = ", ".join(
    [f"c.{name}" for name in CheckpointRow._fields[:-2]]
    + ["coalesce(wc.writes_count, 0)", "coalesce(wc.writes_sum, 0)"]
)
# The checkpoints with their writes digests (alias c; use with CHECKPOINT_COLUMNS).
CHECKPOINTS = (
    "checkpoints c LEFT JOIN LATERAL (SELECT writes_count, writes_sum FROM write_counts"
    " WHERE thread_id = c.thread_id AND checkpoint_ns = c.checkpoint_ns"
    " AND checkpoint_id = c.checkpoint_id OFFSET 0) wc ON true"
)
# A value row: channel, version, type, codec, blob, base_version, crc, row_crc.
VALUE_COLUMNS = "channel, version, type, codec, blob, base_version, crc, row_crc"
# A write row (of one checkpoint): task_id, idx, channel, task_path, type, codec, value, crc.
WRITE_COLUMNS = "task_id, idx, channel, task_path, type, codec, value, crc"


def _aggregated(alias: str, columns: str) -> str:
    return ", ".join(f"array_agg({alias}.{col.strip()})" for col in columns.split(","))


# A checkpoint with its values and its writes, in one row: the checkpoint's columns, then
# each value column as an array (one element per stored value it names), then each
# write column as an array. Used with a WHERE / ORDER BY / LIMIT appended.
SELECT_FULL = (
    f"SELECT {CHECKPOINT_COLUMNS}, v.*, w.* FROM {CHECKPOINTS}"  # noqa: S608 - constants
    f" CROSS JOIN LATERAL (SELECT {_aggregated('b', VALUE_COLUMNS)}"
    " FROM unnest(c.channels, c.versions) AS x(channel, version) CROSS JOIN LATERAL"
    " (SELECT * FROM blobs WHERE thread_id = c.thread_id AND checkpoint_ns = c.checkpoint_ns"
    " AND channel = x.channel AND version = x.version OFFSET 0) b) v"
    f" CROSS JOIN LATERAL (SELECT {_aggregated('ws', WRITE_COLUMNS)} FROM writes ws"
    " WHERE ws.thread_id = c.thread_id AND ws.checkpoint_ns = c.checkpoint_ns"
    " AND ws.checkpoint_id = c.checkpoint_id) w"
)
# A value's delta chain below ``version`` (that version first), nearest base first, down
# to a full copy or MAX_CHAIN + 1 links, in one statement.
SELECT_CHAIN = (
    f"WITH RECURSIVE chain AS (SELECT {VALUE_COLUMNS}, 1 AS depth FROM blobs"  # noqa: S608
    " WHERE thread_id = %(t)s AND checkpoint_ns = %(ns)s AND channel = %(ch)s"
    " AND version = %(ver)s UNION ALL SELECT "
    + ", ".join(f"b.{col.strip()}" for col in VALUE_COLUMNS.split(","))
    + ", chain.depth + 1 FROM chain CROSS JOIN LATERAL (SELECT * FROM blobs"  # noqa: S608
    " WHERE thread_id = %(t)s AND checkpoint_ns = %(ns)s AND channel = chain.channel"
    " AND version = chain.base_version OFFSET 0) b WHERE chain.depth <= %(max)s)"
    f" SELECT {VALUE_COLUMNS} FROM chain ORDER BY depth"
)
SELECT_VALUE = (
    f"SELECT {VALUE_COLUMNS} FROM blobs"  # noqa: S608
    " WHERE thread_id = %s AND checkpoint_ns = %s AND channel = %s AND version = %s"
)
# Lookups of single rows are written as subqueries with OFFSET 0, which the planner runs
# once per row, by primary key: joined, it may scan every value of the thread instead.
#
# put, in one statement (so one round trip and one transaction): store the new values
# and the checkpoint, and count it in its head -- unless a delta's base no longer holds
# what the writer remembers (``stale``) or a version is stored already with other content
# (``clash``): then nothing is written and the statement returns those channels.
PUT = """
WITH v AS (
  SELECT * FROM unnest(%(vch)s::text[], %(vver)s::text[], %(vtype)s::text[],
    %(vcodec)s::text[], %(vblob)s::bytea[], %(vbase)s::text[], %(vcrc)s::bigint[],
    %(vrow)s::bigint[], %(vbasecrc)s::bigint[])
    AS v(channel, version, type, codec, blob, base_version, crc, row_crc, base_crc)
), stale AS (
  SELECT v.channel FROM v WHERE v.base_version IS NOT NULL AND (
    SELECT b.crc FROM blobs b WHERE b.thread_id = %(t)s AND b.checkpoint_ns = %(ns)s
      AND b.channel = v.channel AND b.version = v.base_version OFFSET 0
  ) IS DISTINCT FROM v.base_crc
), clash AS (
  SELECT v.channel FROM v CROSS JOIN LATERAL (
    SELECT b.crc, b.type FROM blobs b WHERE b.thread_id = %(t)s AND b.checkpoint_ns = %(ns)s
      AND b.channel = v.channel AND b.version = v.version OFFSET 0) b
  WHERE b.crc IS DISTINCT FROM v.crc OR b.type <> v.type
), ok AS (
  SELECT NOT EXISTS (SELECT 1 FROM stale) AND NOT EXISTS (SELECT 1 FROM clash) AS ok
), new_values AS (
  INSERT INTO blobs (thread_id, checkpoint_ns, channel, version, type, codec, blob,
    base_version, crc, row_crc)
  SELECT %(t)s, %(ns)s, v.channel, v.version, v.type, v.codec, v.blob, v.base_version,
    v.crc, v.row_crc FROM v, ok WHERE ok.ok
  ON CONFLICT DO NOTHING
), new_checkpoint AS (
  INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_id, run_id, type,
    codec, checkpoint, metadata, metadata_doc, channels, versions, values_count, crc,
    metadata_crc)
  SELECT %(t)s, %(ns)s, %(id)s, %(parent)s, %(run)s, %(type)s, %(codec)s, %(checkpoint)s,
    %(metadata)s, %(doc)s::jsonb, %(ch)s::text[], %(ver)s::text[],
    (SELECT count(*) FROM unnest(%(ch)s::text[], %(ver)s::text[]) AS x(channel, version)
      WHERE EXISTS (SELECT 1 FROM v WHERE v.channel = x.channel AND v.version = x.version)
      OR (SELECT 1 FROM blobs b WHERE b.thread_id = %(t)s AND b.checkpoint_ns = %(ns)s
        AND b.channel = x.channel AND b.version = x.version OFFSET 0) IS NOT NULL),
    %(crc)s, %(mcrc)s
  FROM ok WHERE ok.ok
  ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET
    parent_id = excluded.parent_id, run_id = excluded.run_id, type = excluded.type,
    codec = excluded.codec, checkpoint = excluded.checkpoint, metadata = excluded.metadata,
    metadata_doc = excluded.metadata_doc, channels = excluded.channels,
    versions = excluded.versions, values_count = excluded.values_count, crc = excluded.crc,
    metadata_crc = excluded.metadata_crc
  RETURNING (xmax = 0) AS inserted
), head AS (
  INSERT INTO heads SELECT %(t)s, %(ns)s, %(id)s, 1 FROM new_checkpoint WHERE inserted
  ON CONFLICT (thread_id, checkpoint_ns) DO UPDATE SET
    newest_id = GREATEST(heads.newest_id, excluded.newest_id),
    checkpoint_count = heads.checkpoint_count + 1
)
SELECT (SELECT array_agg(channel) FROM stale), (SELECT array_agg(channel) FROM clash)
"""

# put_writes, in one statement: insert the writes (a regular one already stored is kept,
# a special one replaced) and add what changed to the checkpoint's digest of its writes.
PUT_WRITES = """
WITH w AS (
  SELECT * FROM unnest(%(idx)s::integer[], %(ch)s::text[], %(type)s::text[],
    %(codec)s::text[], %(value)s::bytea[], %(crc)s::bigint[])
    AS w(idx, channel, type, codec, value, crc)
), replaced AS (
  SELECT o.crc FROM writes o JOIN w ON o.idx = w.idx
  WHERE w.idx < 0 AND o.thread_id = %(t)s AND o.checkpoint_ns = %(ns)s
    AND o.checkpoint_id = %(id)s AND o.task_id = %(task)s
), stored AS (
  INSERT INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel,
    task_path, type, codec, value, crc)
  SELECT %(t)s, %(ns)s, %(id)s, %(task)s, w.idx, w.channel, %(path)s, w.type, w.codec,
    w.value, w.crc FROM w
  ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE SET
    channel = excluded.channel, task_path = excluded.task_path, type = excluded.type,
    codec = excluded.codec, value = excluded.value, crc = excluded.crc
    WHERE excluded.idx < 0
  RETURNING crc
)
INSERT INTO write_counts SELECT %(t)s, %(ns)s, %(id)s,
  (SELECT count(*) FROM stored) - (SELECT count(*) FROM replaced),
  (SELECT coalesce(sum(crc), 0) FROM stored) - (SELECT coalesce(sum(crc), 0) FROM replaced)
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET
  writes_count = write_counts.writes_count + excluded.writes_count,
  writes_sum = write_counts.writes_sum + excluded.writes_sum
"""

Row = tuple[Any, ...]

"""How the SQLite checkpointer reads: every row is verified before anything in it is used.

A checkpoint is read in one transaction: its row (checksums, and that it is the row
asked for), each value it names (row checksum, the rebuilt payload's CRC, and that as
many are found as were stored with it), its pending writes (each row's checksum, and
the checkpoint's digest of them), and, for "the newest", the namespace's head record.
Decoding happens after the transaction, so deserialisation never holds the lock.
What each check covers is in :mod:`._integrity`.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.base import (
    Checkpoint,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper._storage.lineage import assemble_history, walk_chains
from statekeeper._storage.payload import EMPTY, decode, loads
from statekeeper._storage.remembered import RecentPayloads
from statekeeper.backends.sqlite._database import Database
from statekeeper.backends.sqlite._integrity import (
    Where,
    check_checkpoint,
    check_key,
    check_value,
    check_writes,
    corrupt,
    is_text,
    key_path,
)
from statekeeper.backends.sqlite._queries import (
    CHECKPOINT_COLUMNS,
    LEGACY_ROWS,
    METADATA_INDEX,
    SELECT_CHANNELS,
    SELECT_HEAD,
    SELECT_METADATA_INDEXES,
    SELECT_NEWEST,
    SELECT_ONE,
    SELECT_VALUE,
    SELECT_VALUES,
    SELECT_WRITES,
    CheckpointRow,
    Raw,
    Rows,
)
from statekeeper.backends.sqlite._values import Memo, ValueReader
from statekeeper.checkpointers.base import TaskWrite
from statekeeper.checkpointers.semantics import checkpoint_config, matches
from statekeeper.errors import CorruptCheckpointError

__all__ = [
    "Rules",
    "check_row",
    "decode_raw",
    "decode_writes",
    "delta_history",
    "load_rules",
    "newest",
    "one",
    "read_page",
    "read_rest",
    "scope_damage",
    "walk_ancestors",
]

Page = list[Raw | CorruptCheckpointError]
Cursor = tuple[str, str, str]
_REQUIRED = ("v", "id", "ts", "channel_versions", "versions_seen")  # what LangGraph reads


@dataclass(frozen=True)
class Rules:
    """How to read one database: its file (for messages), the checkpointer's memory of
    what it wrote, whether rows without checksums are read unverified (``legacy``, see
    :mod:`._integrity`), whether it keeps head records (``heads``) and the metadata keys
    it has an index of (``indexed``)."""

    database: str
    recent: RecentPayloads
    legacy: bool
    heads: bool
    indexed: frozenset[str] = frozenset()


def load_rules(db: Database, recent: RecentPayloads, *, heads: bool) -> Rules:
    """The rules of ``db`` as it is now: whether it holds rows without checksums, and
    which metadata keys it has an index of (``heads``: whether its schema has heads)."""
    legacy = True
    with db.transaction(write=False) as conn:
        if heads:
            legacy_rows = conn.execute(LEGACY_ROWS).fetchone()
            legacy = legacy_rows is None or legacy_rows[0] != 0
        names = [name for (name,) in conn.execute(SELECT_METADATA_INDEXES)]
    indexed = frozenset(name.removeprefix(METADATA_INDEX) for name in names)
    return Rules(db.path, recent, legacy, heads, indexed)


def newest(
    conn: sqlite3.Connection, key: tuple[str, str], rules: Rules, where: Where
) -> CheckpointRow | None:
    """The newest checkpoint row of namespace ``key`` (not yet verified: see
    :func:`read_rest`), checked against the namespace's head record: a missing newest
    row, or checkpoints without their head, are damage. ``None``: no checkpoint."""
    found = conn.execute(SELECT_NEWEST, key).fetchone()
    if found is None:
        head = conn.execute(SELECT_HEAD, key).fetchone() if rules.heads else None
        if head is not None:
            raise corrupt(
                where,
                "checkpoint",
                key_path("heads", *key),
                f"the head record names {head[0]!r} the newest of {head[1]!r} checkpoints, "
                "but none is stored",
            )
        return None
    row, head_id = CheckpointRow._make(found[:-1]), found[-1]
    check_key((row.thread_id, row.checkpoint_ns), key, where, "checkpoints")
    if not rules.heads or head_id == row.checkpoint_id:
        return row
    path = key_path("heads", *key)
    if head_id is None:
        raise corrupt(where, "head", path, "checkpoints are stored without their head record")
    if isinstance(head_id, str) and head_id > row.checkpoint_id:
        missing = Where(where.database, *key, head_id)
        reason = f"the newest checkpoint is missing (the newest found is {row.checkpoint_id!r})"
        raise corrupt(missing, "checkpoint", path, reason)
    reason = f"the head record names {head_id!r} the newest, but {row.checkpoint_id!r} is"
    raise corrupt(where, "head", path, reason)


def one(
    conn: sqlite3.Connection, key: tuple[str, str, str], rules: Rules, where: Where
) -> CheckpointRow | None:
    """The checkpoint row ``key`` (not yet verified), or ``None`` when it is not stored
    and the namespace's head record agrees that nothing is missing."""
    found = conn.execute(SELECT_ONE, key).fetchone()
    if found is not None:
        row = CheckpointRow._make(found)
        check_key((row.thread_id, row.checkpoint_ns, row.checkpoint_id), key, where, "checkpoints")
        return row
    head = conn.execute(SELECT_HEAD, key[:2]).fetchone() if rules.heads else None
    if head is not None and not (isinstance(head[0], str) and key[2] > head[0]):
        # not newer than the newest: it may be a lost row; the head's count says
        damage = scope_damage(conn, key[:2], rules)
        if damage:
            raise damage[0]
    return None


def check_row(row: CheckpointRow, rules: Rules) -> None:
    """Verify a checkpoint row's checksums (:func:`check_checkpoint`)."""
    where = Where(rules.database, row.thread_id, row.checkpoint_ns, row.checkpoint_id)
    check_checkpoint(row, where, legacy=rules.legacy)


def read_rest(
    conn: sqlite3.Connection,
    row: CheckpointRow,
    rules: Rules,
    memo: Memo | None = None,
    *,
    checked: bool = False,
) -> Raw:
    """Verify a checkpoint row (unless already ``checked``) and read its values and
    writes, verified too.

    Raises:
        CorruptCheckpointError: anything it needs is damaged or missing.
    """
    where = Where(rules.database, row.thread_id, row.checkpoint_ns, row.checkpoint_id)
    if not checked:
        check_checkpoint(row, where, legacy=rules.legacy)
    key = (row.thread_id, row.checkpoint_ns)
    reader = ValueReader(conn, rules.recent, memo, legacy=rules.legacy)
    value_rows = conn.execute(SELECT_VALUES, (row.channel_versions, *key)).fetchall()
    values: list[tuple[str, str, bytes]] = []
    for value in value_rows:
        check_key(tuple(value[:2]), tuple(value[8:10]), where, "blobs")
        if value[2] == EMPTY[0]:
            reader.check_empty(key, value, where)
        else:
            values.append((value[0], value[2], reader.read(key, value, where)))
    if row.values_count is not None and len(value_rows) < row.values_count:
        raise corrupt(
            where,
            "value",
            key_path("blobs", *key),
            f"{row.values_count} of the values it names were stored with it, "
            f"{len(value_rows)} are found",
        )
    checkpoint_key = (row.thread_id, row.checkpoint_ns, row.checkpoint_id)
    writes = conn.execute(SELECT_WRITES, checkpoint_key).fetchall()
    digest = (row.writes_count, row.writes_sum)
    check_writes(checkpoint_key, writes, digest, where, legacy=rules.legacy)
    return row, values, writes


def decode_raw(
    serde: SerializerProtocol, raw: Raw, database: str, recent: RecentPayloads | None = None
) -> CheckpointTuple:
    """The checkpoint tuple of a verified :data:`Raw`, its values decoded through
    ``recent`` when given (:meth:`RecentPayloads.load`: the next put, which appends to
    them, serialises only what it appends).

    Raises:
        SerializationError: ``serde`` cannot read a payload (another key, another serde).
        CorruptCheckpointError: a row without checksums (see ``legacy``) decodes to
            something that is not a checkpoint.
    """
    row, values, write_rows = raw
    thread_id, ns, checkpoint_id = row.thread_id, row.checkpoint_ns, row.checkpoint_id
    checkpoint: Checkpoint = decode(serde, row.type, row.codec, row.checkpoint)
    if row.crc is None and (
        not isinstance(checkpoint, dict)
        or any(name not in checkpoint for name in _REQUIRED)
        or checkpoint["id"] != checkpoint_id
    ):
        where = Where(database, thread_id, ns, checkpoint_id)
        path = key_path("checkpoints", thread_id, ns, checkpoint_id)
        raise corrupt(where, "checkpoint", path, "it does not decode to this checkpoint")
    checkpoint["channel_values"] = {
        channel: recent.load(serde, (thread_id, ns, channel), kind, data)
        if recent is not None
        else loads(serde, kind, data)
        for channel, kind, data in values
    }
    return CheckpointTuple(
        config=checkpoint_config(thread_id, ns, checkpoint_id),
        checkpoint=checkpoint,
        metadata=json.loads(row.metadata),
        parent_config=checkpoint_config(thread_id, ns, row.parent_id) if row.parent_id else None,
        pending_writes=[(w.task_id, w.channel, w.value) for w in decode_writes(serde, write_rows)],
    )


def decode_writes(serde: SerializerProtocol, rows: Rows) -> list[TaskWrite]:
    """Verified write rows (``WRITE_COLUMNS``) decoded, in ``writes_sort_key`` order."""
    rows.sort(key=lambda w: writes_sort_key(w[6], w[3], w[4]))
    return [TaskWrite(w[3], w[6], w[5], decode(serde, w[7], w[8], w[9])) for w in rows]


# How a scope's checkpoints are counted, through each way a read may reach them: the
# primary key (get_tuple, namespace listings), the (thread, id) index (listings of a whole
# thread), the id index and the table itself (global listings). Each counts what the
# read that goes that way would see, so an index that lost entries is found too.
_PRIMARY_KEY = "INDEXED BY sqlite_autoindex_checkpoints_1"
_COUNT_NAMESPACES = (
    "SELECT thread_id, checkpoint_ns, COUNT(*), MAX(checkpoint_id) FROM checkpoints {access}"
    "{where} GROUP BY thread_id, checkpoint_ns"
)
_COUNT_THREADS = (
    "SELECT thread_id, COUNT(*), MAX(checkpoint_id) FROM checkpoints"
    " INDEXED BY checkpoints_thread_newest{where} GROUP BY thread_id"
)
_COUNT_ALL = "SELECT COUNT(*), MAX(checkpoint_id) FROM checkpoints INDEXED BY checkpoints_newest"
Counts = dict[Any, tuple[Any, Any]]  # key -> (newest id, count)


def scope_damage(
    conn: sqlite3.Connection, scope: tuple[str | None, str | None], rules: Rules
) -> list[CorruptCheckpointError]:
    """Compare the checkpoints stored in ``scope`` (a thread id and a namespace, each
    ``None`` for all) with their head records, in one snapshot, counted through every
    way a read reaches them: a lost row, a row in a namespace without a head, a head
    without rows, a wrong newest id, an index that lost or gained entries."""
    if not rules.heads:
        return []
    thread_id, ns = scope
    where, params = (" WHERE thread_id = ?", (thread_id,)) if thread_id is not None else ("", ())
    heads: Counts = {
        (t, n): (newest_id, count)
        for t, n, newest_id, count in conn.execute(
            "SELECT thread_id, checkpoint_ns, newest_id, checkpoint_count FROM heads" + where,  # noqa: S608
            params,
        )
    }
    accesses = [_PRIMARY_KEY] if thread_id is not None else [_PRIMARY_KEY, "NOT INDEXED"]
    for access in accesses:
        stored = _counts(conn, _COUNT_NAMESPACES.format(access=access, where=where), params)
        wrong = [k for k in stored.keys() | heads.keys() if stored.get(k) != heads.get(k)]
        if wrong:  # reported for the namespaces asked about; the thread totals cannot tell
            return [
                _head_mismatch(rules.database, key, stored.get(key), heads.get(key))
                for key in sorted(wrong, key=repr)
                if ns is None or key[1] == ns
            ]
    per_thread: dict[Any, tuple[str, int]] = {}
    for (t, _), (newest_id, count) in heads.items():  # consistent with the rows: all text
        before = per_thread.get(t, (newest_id, 0))
        per_thread[t] = (max(before[0], newest_id), before[1] + count)
    through = {
        t: (newest_id, count)
        for t, count, newest_id in conn.execute(_COUNT_THREADS.format(where=where), params)
    }
    errors = [
        _index_mismatch(rules.database, "checkpoints_thread_newest", key)
        for key in sorted(through.keys() | per_thread.keys(), key=repr)
        if through.get(key) != per_thread.get(key)
    ]
    if thread_id is None:
        count, newest_id = conn.execute(_COUNT_ALL).fetchone()
        total = sum(c for _, c in per_thread.values())
        if count != total or (count and newest_id != max(n for n, _ in per_thread.values())):
            errors.append(_index_mismatch(rules.database, "checkpoints_newest", None))
    return errors


def _counts(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> Counts:
    return {(t, n): (newest_id, count) for t, n, count, newest_id in conn.execute(sql, params)}


def _index_mismatch(database: str, index: str, thread_id: Any) -> CorruptCheckpointError:
    where = Where(database, thread_id if is_text(thread_id) else None)
    reason = f"the index {index} does not list the checkpoints the head records count"
    return corrupt(where, "index", key_path("checkpoints", index, thread_id), reason)


def _head_mismatch(
    database: str, key: tuple[Any, Any], found: tuple[Any, int] | None, head: tuple[Any, Any] | None
) -> CorruptCheckpointError:
    where = Where(database, *(k if is_text(k) else None for k in key))
    path = key_path("heads", *key)
    if head is None:
        return corrupt(where, "head", path, "checkpoints are stored without their head record")
    if found is None:
        return corrupt(where, "checkpoint", path, f"all {head[1]!r} checkpoints are missing")
    if isinstance(head[1], int) and found[1] < head[1]:
        reason = f"{head[1] - found[1]} of its {head[1]} checkpoints are missing"
        return corrupt(where, "checkpoint", path, reason)
    reason = (
        f"the head record (newest {head[0]!r} of {head[1]!r}) does not match the "
        f"{found[1]} checkpoints stored (newest {found[0]!r})"
    )
    return corrupt(where, "head", path, reason)


def read_page(
    conn: sqlite3.Connection,
    rows: Sequence[CheckpointRow],
    rules: Rules,
    filter: dict[str, Any] | None,
    scope: tuple[Any, ...],
) -> tuple[Page, Cursor | None]:
    """One page of a listing: each row verified and read (or the damage found in its
    place), those whose metadata does not match ``filter`` left out; and the key the
    next page starts below. ``scope`` is what the listing asked for: thread, namespace,
    checkpoint id, ``before`` id, and the key this page started below."""
    page: Page = []
    last = None
    memo: Memo = {}  # checkpoints of a page share values
    for row in rows:
        try:
            _check_listed(row, scope, rules.database)
            last = (row.checkpoint_id, row.thread_id, row.checkpoint_ns)
            check_row(row, rules)
            if filter and not matches(json.loads(row.metadata), filter):
                continue
            page.append(read_rest(conn, row, rules, memo, checked=True))
        except CorruptCheckpointError as exc:
            page.append(exc)
    if last is None and rows:  # not one row of the page can say where the next begins
        where = Where(rules.database)
        page.append(corrupt(where, "index", "checkpoints", "cannot list past damaged keys"))
    return page, last


def _check_listed(row: CheckpointRow, scope: tuple[Any, ...], database: str) -> None:
    """Raise if a row a listing read is outside what it asked for (a damaged index led
    there) or has a key that is not text (it could not say where the next page begins)."""
    key = (row.thread_id, row.checkpoint_ns, row.checkpoint_id)
    thread_id, ns, checkpoint_id, below, after = scope
    inside = all(is_text(part) for part in key) and (
        (thread_id is None or row.thread_id == thread_id)
        and (ns is None or row.checkpoint_ns == ns)
        and (checkpoint_id is None or row.checkpoint_id == checkpoint_id)
        and (below is None or row.checkpoint_id < below)
        and (after is None or (row.checkpoint_id, row.thread_id, row.checkpoint_ns) < after)
    )
    if not inside:
        where = Where(database, *(part if is_text(part) else None for part in key))
        reason = "a listing found this row where it does not belong (damaged key or index)"
        raise corrupt(where, "index", key_path("checkpoints", *key), reason)


# -- ancestors and DeltaChannel history -------------------------------------------------

_CHAIN = (
    f"WITH RECURSIVE chain({CHECKPOINT_COLUMNS}) AS ("  # noqa: S608 - constant columns
    f" SELECT {CHECKPOINT_COLUMNS} FROM checkpoints"
    "  WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
    " UNION ALL"
    " SELECT " + ", ".join(f"c.{name.strip()}" for name in CHECKPOINT_COLUMNS.split(",")) + ""
    "  FROM chain CROSS JOIN checkpoints AS c ON c.thread_id = ? AND c.checkpoint_ns = ?"
    "  AND c.checkpoint_id = chain.parent_checkpoint_id)"
    " SELECT * FROM chain"
)


def walk_ancestors(
    conn: sqlite3.Connection,
    key: tuple[str, str, str],
    channels: Sequence[str],
    rules: Rules,
    rows: dict[str, CheckpointRow] | None = None,
) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Follow parent links from checkpoint ``key`` (exclusive), nearest first, verifying
    each row. Per channel, return the ancestors visited until one holds a value for it
    (inclusive), and that value's version, the seed. One recursive query, read lazily;
    the rows visited are added to ``rows`` (by id) when given."""
    thread_id, ns, checkpoint_id = key
    where = Where(rules.database, *key)
    holding: set[tuple[str, str]] = set()
    for value in conn.execute(SELECT_CHANNELS, (thread_id, ns, json.dumps(list(channels)))):
        stored = check_value((thread_id, ns), value, where, legacy=rules.legacy)
        if stored.type != EMPTY[0]:
            holding.add((stored.channel, stored.version))
    cursor = conn.execute(_CHAIN, (thread_id, ns, checkpoint_id, thread_id, ns))
    chains, seed_versions = walk_chains(
        checkpoint_id,
        _verified_chain(cursor, key, rules, rows),
        channels,
        lambda ch, version: (ch, version) in holding,
    )
    cursor.close()
    return chains, seed_versions


def _verified_chain(
    cursor: sqlite3.Cursor,
    key: tuple[str, str, str],
    rules: Rules,
    rows: dict[str, CheckpointRow] | None,
) -> Iterator[tuple[str, dict[str, str]]]:
    expected: Any = key[2]
    for found in cursor:
        row = CheckpointRow._make(found)
        where = Where(rules.database, key[0], key[1], expected)
        check_key(
            (row.thread_id, row.checkpoint_ns, row.checkpoint_id),
            (*key[:2], expected),
            where,
            "checkpoints",
        )
        check_checkpoint(row, where, legacy=rules.legacy)
        if rows is not None:
            rows[row.checkpoint_id] = row
        expected = row.parent_id
        if row.checkpoint_id != key[2]:  # the target itself: its writes are not history yet
            yield row.checkpoint_id, json.loads(row.channel_versions)


def delta_history(
    conn: sqlite3.Connection,
    serde: SerializerProtocol,
    key: tuple[str, str, str],
    channels: Sequence[str],
    rules: Rules,
) -> Mapping[str, DeltaChannelHistory]:
    """``get_delta_channel_history`` for checkpoint ``key`` (see the checkpointer),
    every row it reads verified, each ancestor's writes against its digest."""
    thread_id, ns, _ = key
    rows: dict[str, CheckpointRow] = {}
    chains, seed_versions = walk_ancestors(conn, key, channels, rules, rows)
    reader = ValueReader(conn, rules.recent, legacy=rules.legacy)
    seeds: dict[str, Any] = {}
    for ch, version in seed_versions.items():
        where = Where(rules.database, *key)
        row = conn.execute(SELECT_VALUE, (thread_id, ns, ch, version)).fetchone()
        if row is None:
            raise corrupt(where, "value", key_path("blobs", thread_id, ns, ch, version), "missing")
        check_key(tuple(row[:2]), (ch, version), where, "blobs")
        seeds[ch] = loads(serde, row[2], reader.read((thread_id, ns), row, where))
    by_checkpoint: dict[tuple[str, str], list[PendingWrite]] = {}
    for ancestor in {a for chain in chains.values() for a in chain}:
        row = rows[ancestor]
        ancestor_key = (thread_id, ns, ancestor)
        write_rows = conn.execute(SELECT_WRITES, ancestor_key).fetchall()
        where = Where(rules.database, *ancestor_key)
        digest = (row.writes_count, row.writes_sum)
        check_writes(ancestor_key, write_rows, digest, where, legacy=rules.legacy)
        for w in decode_writes(serde, write_rows):
            by_checkpoint.setdefault((ancestor, w.channel), []).append(
                (w.task_id, w.channel, w.value)
            )
    return assemble_history(
        channels, chains, seeds, lambda ancestor, ch: by_checkpoint.get((ancestor, ch), [])
    )

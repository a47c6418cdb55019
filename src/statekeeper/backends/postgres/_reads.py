"""How the PostgreSQL checkpointer reads: every row is verified before anything in it is used.

A checkpoint is read with its values and its writes in one statement (``SELECT_FULL``):
its row (checksums), each value it names (row checksum, the rebuilt payload's CRC, and
that as many are found as were stored with it), its pending writes (each row's checksum
and the checkpoint's digest of them) and, for "the newest", the namespace's head record.
A value stored as an append delta whose base this process did not write last costs one
more query per link of its chain. Decoding happens after the rows are read. Every read
is an :data:`~._database.Op`, run sync or async by :class:`~._database.Database`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
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

from statekeeper._storage.deltas import StoredValue, rebuild_all
from statekeeper._storage.lineage import assemble_history, walk_chains
from statekeeper._storage.payload import EMPTY, decode, loads
from statekeeper._storage.remembered import MAX_CHAIN, RecentPayloads
from statekeeper.backends.postgres import decode_id, encode_id
from statekeeper.backends.postgres._integrity import (
    Where,
    check_checkpoint,
    check_value,
    check_writes,
    corrupt,
    key_path,
)
from statekeeper.backends.postgres._running import BEGIN_READ, COMMIT, Op, Q
from statekeeper.backends.postgres._schema import (
    CHECKPOINT_COLUMNS,
    CHECKPOINTS,
    N_CHECKPOINT,
    SELECT_CHAIN,
    SELECT_FULL,
    SELECT_VALUE,
    VALUE_COLUMNS,
    WRITE_COLUMNS,
    CheckpointRow,
    Row,
)
from statekeeper.checkpointers.base import TaskWrite
from statekeeper.checkpointers.semantics import checkpoint_config
from statekeeper.errors import CorruptCheckpointError, SerializationError

__all__ = [
    "Raw",
    "Reader",
    "decode_raw",
    "decode_writes",
]

Memo = dict[tuple[str, ...], bytes]
_N_VALUE = len(VALUE_COLUMNS.split(","))
_N_WRITE = len(WRITE_COLUMNS.split(","))


@dataclass(frozen=True, slots=True)
class Raw:
    """A verified checkpoint row, its values ((channel, type, full payload) of each
    non-empty one) and its write rows (``WRITE_COLUMNS``), ids as stored."""

    row: CheckpointRow
    values: list[tuple[str, str, bytes]]
    writes: list[Row]


def split_full(found: Row) -> tuple[CheckpointRow, list[Row], list[Row]]:
    """A ``SELECT_FULL`` row: the checkpoint row, its value rows and its write rows."""
    row = CheckpointRow._make(found[:N_CHECKPOINT])
    value_cols = found[N_CHECKPOINT : N_CHECKPOINT + _N_VALUE]
    write_cols = found[N_CHECKPOINT + _N_VALUE : N_CHECKPOINT + _N_VALUE + _N_WRITE]
    values = list(zip(*value_cols, strict=True)) if value_cols[0] is not None else []
    writes = list(zip(*write_cols, strict=True)) if write_cols[0] is not None else []
    return row, values, writes


@dataclass
class Reader:
    """The reads of one checkpointer: its database name (for messages) and its memory of
    the payloads it wrote last (``recent``)."""

    database: str
    recent: RecentPayloads

    def where(self, *key: str | None) -> Where:
        return Where(self.database, *(decode_id(k) if k is not None else None for k in key))

    # -- one checkpoint ------------------------------------------------------------------

    def newest(self, key: tuple[str, str]) -> Op[Raw | None]:
        """The newest checkpoint of namespace ``key`` (stored ids), verified, checked
        against the head record. ``None``: no checkpoint."""
        found = yield Q(
            f"SELECT h.newest_id, h.checkpoint_count, n.* FROM (SELECT 1) AS one"  # noqa: S608
            " LEFT JOIN heads h ON h.thread_id = %(t)s AND h.checkpoint_ns = %(ns)s"
            f" LEFT JOIN LATERAL ({SELECT_FULL} WHERE c.thread_id = %(t)s"
            " AND c.checkpoint_ns = %(ns)s ORDER BY c.checkpoint_id DESC LIMIT 1) n ON true",
            {"t": key[0], "ns": key[1]},
            "one",
            prepare=True,
        )
        head_id, head_count, rest = found[0], found[1], found[2:]
        where = self.where(*key)
        path = key_path("heads", *key)
        if rest[0] is None:
            if head_id is not None:
                reason = (
                    f"the head record names {decode_id(head_id)!r} the newest of "
                    f"{head_count} checkpoints, but none is stored"
                )
                raise corrupt(where, "checkpoint", path, reason)
            return None
        row, values, writes = split_full(rest)
        if head_id != row.checkpoint_id:
            if head_id is None:
                reason = "checkpoints are stored without their head record"
                raise corrupt(where, "head", path, reason)
            if head_id > row.checkpoint_id:
                missing = self.where(*key, head_id)
                reason = (
                    "the newest checkpoint is missing (the newest found is "
                    f"{decode_id(row.checkpoint_id)!r})"
                )
                raise corrupt(missing, "checkpoint", path, reason)
            reason = f"the head record names {decode_id(head_id)!r} the newest, but another is"
            raise corrupt(where, "head", path, reason)
        return (yield from self.verified(row, values, writes, {}))

    def one(self, key: tuple[str, str, str]) -> Op[Raw | None]:
        """The checkpoint ``key`` (stored ids), verified; ``None`` when it is not stored
        and the namespace's head record agrees that nothing is missing."""
        found = yield Q(
            f"{SELECT_FULL} WHERE c.thread_id = %s AND c.checkpoint_ns = %s"
            " AND c.checkpoint_id = %s",
            key,
            "one",
        )
        if found is not None:
            row, values, writes = split_full(found)
            return (yield from self.verified(row, values, writes, {}))
        damage = yield from self.scope_damage(key[:2])
        if damage:
            raise damage[0]
        return None

    def verified(
        self,
        row: CheckpointRow,
        value_rows: list[Row],
        writes: list[Row],
        memo: Memo,
        *,
        checked: bool = False,
    ) -> Op[Raw]:
        """Verify a checkpoint row (unless ``checked`` already) with its value and write
        rows; rebuild its values."""
        key = (row.thread_id, row.checkpoint_ns)
        where = self.where(*key, row.checkpoint_id)
        if not checked:
            check_checkpoint(row, where)
        values: list[tuple[str, str, bytes]] = []
        for value in value_rows:
            stored = check_value(key, value, where)
            if stored.type != EMPTY[0]:
                data = yield from self.payload(key, stored, where, memo)
                values.append((stored.channel, stored.type, data))
        if len(value_rows) < row.values_count:
            reason = (
                f"{row.values_count} of the values it names were stored with it, "
                f"{len(value_rows)} are found"
            )
            raise corrupt(where, "value", key_path("blobs", *key), reason)
        checkpoint_key = (*key, row.checkpoint_id)
        check_writes(checkpoint_key, writes, (row.writes_count, row.writes_sum), where)
        return Raw(row, values, writes)

    def payload(
        self, key: tuple[str, str], wanted: StoredValue, where: Where, memo: Memo
    ) -> Op[bytes]:
        """The full payload of a verified value of namespace ``key``, following its
        append-delta chain (verified link by link, the result against its CRC)."""
        memo_key = (*key, wanted.channel, wanted.version)
        if memo_key in memo:
            return memo[memo_key]
        remembered = self.recent.get((*key, wanted.channel))
        if remembered is not None and (remembered.version, remembered.crc) == (
            wanted.version,
            wanted.crc,
        ):
            memo[memo_key] = remembered.data
            return remembered.data
        chain, below = [wanted], None
        links: list[Row] | None = None  # the rows below, read in one statement when needed
        while chain[-1].base is not None:
            below = memo.get((*key, wanted.channel, chain[-1].base))
            if below is not None:
                break
            if links is None:
                params = {"t": key[0], "ns": key[1], "ch": wanted.channel}
                links = yield Q(SELECT_CHAIN, {**params, "ver": chain[-1].base, "max": MAX_CHAIN})
                links.reverse()
            base = None
            if len(chain) <= MAX_CHAIN and links:
                base = links.pop()
                if tuple(base[:2]) != (wanted.channel, chain[-1].base):
                    base = None
            if base is None:
                reason = (
                    "its chain of deltas is longer than any written"
                    if len(chain) > MAX_CHAIN
                    else f"the value at version {chain[-1].version} is a delta on this "
                    "version, which is missing"
                )
                path = key_path("blobs", *key, wanted.channel, chain[-1].base)
                raise corrupt(where, "delta", path, reason)
            chain.append(check_value(key, base, where))
        try:
            rebuilt = rebuild_all(chain, below)
        except SerializationError as exc:
            path = key_path("blobs", *key, wanted.channel, wanted.version)
            record = "value" if len(chain) == 1 and below is None else "delta"
            raise corrupt(where, record, path, str(exc).split(";")[0]) from exc
        for link, data in zip(chain, rebuilt, strict=True):
            memo[(*key, link.channel, link.version)] = data
        return memo[memo_key]

    # -- integrity of a whole scope ------------------------------------------------------

    def scope_damage(
        self, scope: tuple[str | None, str | None]
    ) -> Op[list[CorruptCheckpointError]]:
        """Compare the checkpoints stored in ``scope`` (a thread and a namespace, stored
        ids, each ``None`` for all) with their head records: a lost row, a namespace
        without a head, a head without rows, a wrong newest id."""
        where, params = [], []
        for column, value in (("thread_id", scope[0]), ("checkpoint_ns", scope[1])):
            if value is not None:
                where.append(f"{column} = %s")
                params.append(value)
        cond = (" WHERE " + " AND ".join(where)) if where else ""
        rows = yield Q(
            "SELECT coalesce(h.thread_id, c.thread_id), coalesce(h.checkpoint_ns,"  # noqa: S608
            " c.checkpoint_ns), h.newest_id, h.checkpoint_count, c.newest, c.n FROM"
            f" (SELECT * FROM heads{cond}) h FULL JOIN (SELECT thread_id, checkpoint_ns,"
            f" max(checkpoint_id) AS newest, count(*) AS n FROM checkpoints{cond}"
            " GROUP BY thread_id, checkpoint_ns) c ON h.thread_id = c.thread_id"
            " AND h.checkpoint_ns = c.checkpoint_ns"
            " WHERE (h.newest_id, h.checkpoint_count) IS DISTINCT FROM (c.newest, c.n)"
            " ORDER BY 1, 2",
            [*params, *params],
        )
        return [self._head_mismatch(*row) for row in rows]

    def _head_mismatch(
        self, t: str, ns: str, head_id: Any, head_count: Any, newest: Any, count: Any
    ) -> CorruptCheckpointError:
        where, path = self.where(t, ns), key_path("heads", t, ns)
        if head_id is None:
            return corrupt(where, "head", path, "checkpoints are stored without their head record")
        if newest is None:
            return corrupt(where, "checkpoint", path, f"all {head_count} checkpoints are missing")
        if count < head_count:
            reason = f"{head_count - count} of its {head_count} checkpoints are missing"
            return corrupt(where, "checkpoint", path, reason)
        reason = (
            f"the head record (newest {decode_id(head_id)!r} of {head_count}) does not match "
            f"the {count} checkpoints stored (newest {decode_id(newest)!r})"
        )
        return corrupt(where, "head", path, reason)

    # -- writes and DeltaChannel history -------------------------------------------------

    def writes(self, key: tuple[str, str, str]) -> Op[list[Row]]:
        """The verified write rows of checkpoint ``key`` (stored ids)."""
        found = yield Q(
            "SELECT coalesce(c.writes_count, 0), coalesce(c.writes_sum, 0), w.*"  # noqa: S608
            " FROM (SELECT 1) AS one LEFT JOIN write_counts c ON c.thread_id = %(t)s"
            " AND c.checkpoint_ns = %(ns)s AND c.checkpoint_id = %(id)s"
            " CROSS JOIN LATERAL (SELECT "
            + ", ".join(f"array_agg(ws.{col.strip()})" for col in WRITE_COLUMNS.split(","))
            + " FROM writes ws WHERE ws.thread_id = %(t)s AND ws.checkpoint_ns = %(ns)s"
            " AND ws.checkpoint_id = %(id)s) w",
            {"t": key[0], "ns": key[1], "id": key[2]},
            "one",
        )
        rows = list(zip(*found[2:], strict=True)) if found[2] is not None else []
        check_writes(key, rows, (found[0], found[1]), self.where(*key))
        return rows

    def delta_history(
        self, serde: SerializerProtocol, key: tuple[str, str, str], channels: Sequence[str]
    ) -> Op[Mapping[str, DeltaChannelHistory]]:
        """``get_delta_channel_history`` for checkpoint ``key`` (stored ids), in one
        snapshot, every row it reads verified."""
        yield BEGIN_READ
        stored_channels = [encode_id(ch) for ch in channels]
        chains, seeds_at, rows = yield from self.walk(key, stored_channels)
        where = self.where(*key)
        seeds: dict[str, Any] = {}
        memo: Memo = {}
        for ch, version in seeds_at.items():
            found = yield Q(SELECT_VALUE, (*key[:2], ch, version), "one")
            if found is None:
                raise corrupt(where, "value", key_path("blobs", *key[:2], ch, version), "missing")
            stored = check_value(key[:2], found, where)
            data = yield from self.payload(key[:2], stored, where, memo)
            seeds[decode_id(ch)] = loads(serde, stored.type, data)
        by_checkpoint: dict[tuple[str, str], list[PendingWrite]] = {}
        for ancestor in {a for chain in chains.values() for a in chain}:
            ancestor_key = (*key[:2], ancestor)
            write_rows = yield Q(SELECT_WRITES_OF, ancestor_key)
            row = rows[ancestor]
            digest = (row.writes_count, row.writes_sum)
            check_writes(ancestor_key, write_rows, digest, self.where(*ancestor_key))
            for w in decode_writes(serde, write_rows):
                by_checkpoint.setdefault((ancestor, w.channel), []).append(
                    (w.task_id, w.channel, w.value)
                )
        yield COMMIT
        decoded_chains = {decode_id(ch): chain for ch, chain in chains.items()}
        return assemble_history(
            list(channels),
            decoded_chains,
            seeds,
            lambda ancestor, ch: by_checkpoint.get((ancestor, ch), []),
        )

    def walk(
        self, key: tuple[str, str, str], channels: Sequence[str]
    ) -> Op[tuple[dict[str, list[str]], dict[str, str], dict[str, CheckpointRow]]]:
        """Follow parent links from checkpoint ``key`` (exclusive), nearest first,
        verifying each row; per (stored) channel, the ancestors visited until one holds
        a value for it, and that value's version (see ``lineage.walk_chains``)."""
        t, ns, checkpoint_id = key
        where = self.where(*key)
        holding: set[tuple[str, str]] = set()
        for value in (
            yield Q(
                f"SELECT {VALUE_COLUMNS} FROM blobs WHERE thread_id = %s"  # noqa: S608
                " AND checkpoint_ns = %s AND channel = ANY(%s::text[])",
                (t, ns, list(channels)),
            )
        ):
            stored = check_value((t, ns), value, where)
            if stored.type != EMPTY[0]:
                holding.add((stored.channel, stored.version))
        found = yield Q(CHAIN, {"t": t, "ns": ns, "id": checkpoint_id})
        rows: dict[str, CheckpointRow] = {}
        ancestors: list[tuple[str, dict[str, str]]] = []
        for item in found:
            row = CheckpointRow._make(item)
            check_checkpoint(row, self.where(t, ns, row.checkpoint_id))
            rows[row.checkpoint_id] = row
            if row.checkpoint_id != checkpoint_id:
                ancestors.append(
                    (row.checkpoint_id, dict(zip(row.channels, row.versions, strict=True)))
                )
        chains, seeds = walk_chains(
            checkpoint_id, ancestors, channels, lambda ch, version: (ch, version) in holding
        )
        return chains, seeds, rows


SELECT_WRITES_OF = (
    f"SELECT {WRITE_COLUMNS} FROM writes"  # noqa: S608
    " WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s"
)
# A checkpoint and its ancestors, nearest first (a cycle, which only a re-put checkpoint
# can make, ends where it closes).
CHAIN = (
    "WITH RECURSIVE chain AS (SELECT c.checkpoint_id, c.parent_id, 0 AS depth,"  # noqa: S608
    " ARRAY[c.checkpoint_id] AS seen FROM checkpoints c"
    " WHERE c.thread_id = %(t)s AND c.checkpoint_ns = %(ns)s AND c.checkpoint_id = %(id)s"
    " UNION ALL SELECT c.checkpoint_id, c.parent_id, chain.depth + 1,"
    " chain.seen || c.checkpoint_id FROM chain JOIN checkpoints c ON c.thread_id = %(t)s"
    " AND c.checkpoint_ns = %(ns)s AND c.checkpoint_id = chain.parent_id"
    " WHERE NOT c.checkpoint_id = ANY(chain.seen))"
    f" SELECT {CHECKPOINT_COLUMNS} FROM chain JOIN {CHECKPOINTS}"
    " ON c.thread_id = %(t)s AND c.checkpoint_ns = %(ns)s"
    " AND c.checkpoint_id = chain.checkpoint_id ORDER BY chain.depth"
)


def decode_raw(
    serde: SerializerProtocol, raw: Raw, recent: RecentPayloads | None = None
) -> CheckpointTuple:
    """The checkpoint tuple of a verified :class:`Raw`, its values decoded through
    ``recent`` when given (:meth:`RecentPayloads.load`: the next put, which appends to
    them, serialises only what it appends)."""
    row = raw.row
    thread_id, ns = decode_id(row.thread_id), decode_id(row.checkpoint_ns)
    checkpoint_id = decode_id(row.checkpoint_id)
    checkpoint: Checkpoint = decode(serde, row.type, row.codec, row.checkpoint)
    key = (row.thread_id, row.checkpoint_ns)
    checkpoint["channel_values"] = {
        decode_id(channel): recent.load(serde, (*key, channel), kind, data)
        if recent is not None
        else loads(serde, kind, data)
        for channel, kind, data in raw.values
    }
    parent = decode_id(row.parent_id) if row.parent_id else None
    return CheckpointTuple(
        config=checkpoint_config(thread_id, ns, checkpoint_id),
        checkpoint=checkpoint,
        metadata=json.loads(row.metadata),
        parent_config=checkpoint_config(thread_id, ns, parent) if parent else None,
        pending_writes=[(w.task_id, w.channel, w.value) for w in decode_writes(serde, raw.writes)],
    )


def decode_writes(serde: SerializerProtocol, rows: list[Row]) -> list[TaskWrite]:
    """Verified write rows (``WRITE_COLUMNS``) decoded, in ``writes_sort_key`` order."""
    decoded = [
        (decode_id(w[0]), w[1], decode_id(w[2]), decode_id(w[3]), w[4], w[5], w[6]) for w in rows
    ]
    decoded.sort(key=lambda w: writes_sort_key(w[3], w[0], w[1]))
    return [TaskWrite(w[0], w[3], w[2], decode(serde, w[4], w[5], w[6])) for w in decoded]

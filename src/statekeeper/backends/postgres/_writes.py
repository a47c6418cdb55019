"""How the PostgreSQL checkpointer stores a ``put`` and a ``put_writes``: each is one
statement (``_schema.PUT``, ``_schema.PUT_WRITES``), so one round trip and one
transaction: all of it is stored, or nothing.

A put whose planned append delta finds its base changed (another process rewrote or
deleted it) is sent again with that value's full copy; a put of a version already stored
with other content (LangGraph never does that) first turns the deltas built on the old
content into full copies, in the same transaction as the put.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from statekeeper._storage.deltas import PlannedValue, StoredValue
from statekeeper.backends.postgres import encode_id
from statekeeper.backends.postgres._integrity import (
    check_value,
    checkpoint_crc,
    metadata_crc,
    value_crc,
    write_crc,
)
from statekeeper.backends.postgres._reads import Reader
from statekeeper.backends.postgres._running import BEGIN, COMMIT, Op, Q
from statekeeper.backends.postgres._schema import PUT, PUT_WRITES, VALUE_COLUMNS
from statekeeper.checkpointers.records import PreparedPut, PreparedWrites

__all__ = ["array_literal", "put", "put_writes"]

# A JSON \u escape of a UTF-16 surrogate, and whether it is a high (lead) one.
_SURROGATE = re.compile(r"\\u[dD]([89abAB]|[c-fC-F])[0-9a-fA-F]{2}")


def jsonb_text(text: str) -> str | None:
    """Canonical JSON text as ``jsonb`` can hold it, or ``None``: ``jsonb`` refuses NUL
    (``\\u0000``) and lone surrogates, which metadata may hold (such rows are then found
    by filters in Python only)."""
    if "\\u0000" in text:
        return None
    if "\\ud" in text or "\\uD" in text:
        expect_low = False
        last = -1
        for match in _SURROGATE.finditer(text):
            high = match[1] in "89abAB"
            adjacent = match.start() == last
            if expect_low and (high or not adjacent):
                return None  # a high surrogate not followed by a low one
            if not high and not (expect_low and adjacent):
                return None  # a low surrogate without its high one
            expect_low, last = high, match.end()
        if expect_low:
            return None
    return text


def array_literal(items: Sequence[str | int | bytes | bytearray | memoryview | None]) -> str:
    """``items`` as the text of a PostgreSQL array (``{"a",1,NULL,"\\\\x00ff"}``), sent as a
    parameter and cast by the statement (``%(x)s::text[]``). psycopg adapts a Python list
    by inspecting its items at every call, several microseconds a list; the statements
    of every put send a dozen short lists, so they are written here instead (strings
    quoted and escaped, ints as digits, bytes in bytea's hex form)."""
    parts = []
    for item in items:
        if item is None:
            parts.append("NULL")
        elif isinstance(item, str):
            parts.append('"' + item.replace("\\", "\\\\").replace('"', '\\"') + '"')
        elif isinstance(item, int):
            parts.append(str(item))
        else:  # bytes, bytearray, memoryview
            parts.append('"\\\\x' + item.hex() + '"')
    return "{" + ",".join(parts) + "}"


def put(prepared: PreparedPut, plans: Sequence[PlannedValue], reader: Reader) -> Op[list[bool]]:
    """Store a prepared put with its planned values; return, per plan, whether its full
    copy was stored in place of its delta."""
    prepared = prepared.packed()
    t, ns = encode_id(prepared.thread_id), encode_id(prepared.checkpoint_ns)
    key = (t, ns, encode_id(prepared.checkpoint_id))
    parent = encode_id(prepared.parent_id) if prepared.parent_id is not None else None
    run = encode_id(prepared.run_id) if prepared.run_id is not None else None
    channels = [encode_id(ch) for ch in prepared.version_keys]
    versions = list(prepared.version_keys.values())
    payload = prepared.checkpoint
    params: dict[str, Any] = {
        "t": t,
        "ns": ns,
        "id": key[2],
        "parent": parent,
        "run": run,
        "type": payload[0],
        "codec": payload[1],
        "checkpoint": payload[2],
        "metadata": prepared.metadata_json,
        "doc": jsonb_text(prepared.metadata_json),
        "ch": array_literal(channels),
        "ver": array_literal(versions),
        "crc": checkpoint_crc(key, parent, run, payload, channels, versions),
        "mcrc": metadata_crc(key, prepared.metadata_json),
    }
    fallback = [False] * len(plans)
    in_transaction = False
    for _ in range(4):
        chosen = [
            plan.fallback if use and plan.fallback is not None else plan.stored
            for plan, use in zip(plans, fallback, strict=True)
        ]
        params.update(_value_params(t, ns, chosen, plans))
        stale, clash = yield Q(PUT, params, "one", prepare=True)
        if not stale and not clash:
            if in_transaction:
                yield COMMIT
            return fallback
        for i, plan in enumerate(plans):
            if encode_id(plan.stored.channel) in (stale or ()):
                fallback[i] = True
        if clash:
            if not in_transaction:
                yield BEGIN
                in_transaction = True
            for value in chosen:
                if encode_id(value.channel) in clash:
                    yield from _detach(reader, (t, ns), value)
    raise AssertionError(f"put of {key!r} did not settle")  # pragma: no cover


def _value_params(
    t: str, ns: str, chosen: Sequence[StoredValue], plans: Sequence[PlannedValue]
) -> dict[str, str]:
    stored = [
        StoredValue(encode_id(v.channel), v.version, v.type, v.codec, v.data, v.base, v.crc)
        for v in chosen
    ]
    return {
        "vch": array_literal([v.channel for v in stored]),
        "vver": array_literal([v.version for v in stored]),
        "vtype": array_literal([v.type for v in stored]),
        "vcodec": array_literal([v.codec for v in stored]),
        "vblob": array_literal([v.data for v in stored]),
        "vbase": array_literal([v.base for v in stored]),
        "vcrc": array_literal([v.crc for v in stored]),
        "vrow": array_literal([value_crc(t, ns, v) for v in stored]),
        "vbasecrc": array_literal(
            [
                plan.base_crc if v.base is not None else None
                for v, plan in zip(stored, plans, strict=True)
            ]
        ),
    }


def _detach(reader: Reader, key: tuple[str, str], value: StoredValue) -> Op[None]:
    """Before a stored version of a channel is replaced with other content, store the
    deltas built on it as full copies (verified first), then delete the old version."""
    channel = encode_id(value.channel)
    dependents = yield Q(
        f"SELECT {VALUE_COLUMNS} FROM blobs WHERE thread_id = %s AND checkpoint_ns = %s"  # noqa: S608
        " AND channel = %s AND base_version = %s FOR UPDATE",
        (*key, channel, value.version),
    )
    where = reader.where(*key)
    for row in dependents:
        stored = check_value(key, row, where)
        data = yield from reader.payload(key, stored, where, {})
        full = StoredValue(channel, stored.version, stored.type, "", data, None, stored.crc)
        yield Q(
            "UPDATE blobs SET codec = '', blob = %s, base_version = NULL, row_crc = %s"
            " WHERE thread_id = %s AND checkpoint_ns = %s AND channel = %s AND version = %s",
            (data, value_crc(*key, full), *key, channel, stored.version),
            "count",
        )
    yield Q(
        "DELETE FROM blobs WHERE thread_id = %s AND checkpoint_ns = %s AND channel = %s"
        " AND version = %s",
        (*key, channel, value.version),
        "count",
    )
    reader.recent.discard((*key, channel))


def put_writes(prepared: PreparedWrites) -> Op[None]:
    """Store prepared writes: a regular write already stored is kept, a special one
    replaced; the checkpoint's digest of its writes is added to by what changed."""
    prepared = prepared.packed()
    key = (
        encode_id(prepared.thread_id),
        encode_id(prepared.checkpoint_ns),
        encode_id(prepared.checkpoint_id),
    )
    task, path = encode_id(prepared.task_id), encode_id(prepared.task_path)
    rows = [
        (task, w.idx, encode_id(w.channel), path, w.type, w.codec, w.data) for w in prepared.writes
    ]
    if not rows:
        return
    yield Q(
        PUT_WRITES,
        {
            "t": key[0],
            "ns": key[1],
            "id": key[2],
            "task": task,
            "path": path,
            "idx": array_literal([r[1] for r in rows]),
            "ch": array_literal([r[2] for r in rows]),
            "type": array_literal([r[4] for r in rows]),
            "codec": array_literal([r[5] for r in rows]),
            "value": array_literal([r[6] for r in rows]),
            "crc": array_literal([write_crc(key, r) for r in rows]),
        },
        "count",
        prepare=True,
    )

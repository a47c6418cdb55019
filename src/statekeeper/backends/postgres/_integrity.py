"""Checksums of the PostgreSQL checkpointer's rows, and the errors that report damage.

Every row a read turns into state carries a CRC-32 computed by the writer over what it
stores (:func:`checksum`, over the ids as stored), verified by every read before anything
in the row is used:

* ``checkpoints.crc`` — the key, parent id, run id, the serialised checkpoint and its
  channel versions; ``checkpoints.metadata_crc`` — the key and the metadata text;
* ``blobs.row_crc`` — the key, type, codec, delta base and ``blobs.crc``, the CRC of the
  full payload, which the read checks on the payload it rebuilt;
* ``writes.crc`` — every column of the pending write.

What a row cannot say about itself is kept by the rows that list it and checked on read:
``checkpoints.writes_count`` / ``writes_sum`` (the number of its write rows and the sum of
their ``crc``, added to by each ``put_writes``, never recounted), ``values_count`` (how
many of the values it names were stored when it was) and ``heads`` (per namespace: the
newest checkpoint id and how many there are), so a lost row is found too.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

from statekeeper._storage.damage import Where, corrupt_error
from statekeeper._storage.damage import with_location as locate
from statekeeper._storage.deltas import StoredValue
from statekeeper.backends.postgres import decode_id
from statekeeper.errors import CorruptCheckpointError

__all__ = [
    "Where",
    "check_checkpoint",
    "check_value",
    "check_writes",
    "checkpoint_crc",
    "checksum",
    "corrupt",
    "key_path",
    "metadata_crc",
    "value_crc",
    "with_location",
    "write_crc",
]


def checksum(*fields: object) -> int:
    """CRC-32 over ``fields``, framed so that no two different rows have the same input:
    a header lists each field's type and length, then come the texts, then the bytes."""
    header: list[str] = []
    texts: list[str] = []
    chunks: list[bytes] = []
    for field in fields:
        if isinstance(field, str):
            header.append(f"s{len(field)}")
            texts.append(field)
        elif isinstance(field, bytes | bytearray | memoryview):
            data = bytes(field)
            header.append(f"b{len(data)}")
            chunks.append(data)
        elif field is None:
            header.append("n")
        elif isinstance(field, list | tuple):
            header.append(f"l{len(field)}")
            texts.append(json.dumps(list(field), ensure_ascii=True))
        elif type(field) is int:
            header.append(f"i{field}")
        else:
            text = repr(field)
            header.append(f"{type(field).__name__}{len(text)}")
            texts.append(text)
    crc = zlib.crc32((",".join(header) + ";" + "".join(texts)).encode("utf-8", "surrogatepass"))
    for chunk in chunks:
        crc = zlib.crc32(chunk, crc)
    return crc


def checkpoint_crc(
    key: tuple[str, str, str],
    parent_id: str | None,
    run_id: str | None,
    payload: tuple[object, object, object],
    channels: object,
    versions: object,
) -> int:
    """``checkpoints.crc``: everything in the row but the metadata and the counts."""
    return checksum(*key, parent_id, run_id, *payload, channels, versions)


def metadata_crc(key: tuple[str, str, str], metadata: object) -> int:
    """``checkpoints.metadata_crc``."""
    return checksum(*key, metadata)


def value_crc(thread_id: object, ns: object, value: StoredValue) -> int:
    """``blobs.row_crc``; the payload is covered by ``value.crc``, checked on rebuild."""
    return checksum(
        thread_id, ns, value.channel, value.version, value.type, value.codec, value.base, value.crc
    )


def write_crc(key: tuple[str, str, str], row: tuple[Any, ...]) -> int:
    """``writes.crc``: the checkpoint's key and the write's columns before ``crc``."""
    return checksum(*key, *row[:7])


def key_path(table: str, *key: object) -> str:
    """A row's ``Damage.path``: ``<table>:<key as a JSON list>`` (ids decoded)."""
    shown = [decode_id(k) if isinstance(k, str) else k for k in key]
    return f"{table}:{json.dumps(shown, ensure_ascii=False, default=repr)}"


def corrupt(where: Where, record: str, path: str, reason: str) -> CorruptCheckpointError:
    """The error for damage found at ``path`` (a row, see :func:`key_path`)."""
    return corrupt_error("postgres", _place(where), where, record, path, reason)


def _place(where: Where) -> str:
    return f"PostgreSQL {where.database}"


def with_location(error: CorruptCheckpointError, where: Where) -> CorruptCheckpointError:
    """``error`` with the thread, namespace and checkpoint of ``where`` filled in where
    it names none (a driver error names only the database)."""
    return locate(error, where, _place(where))


def check_checkpoint(row: Any, where: Where) -> None:
    """Verify a ``checkpoints`` row (a :class:`~._schema.CheckpointRow`).

    Raises:
        CorruptCheckpointError: record ``"checkpoint"`` or ``"metadata"``.
    """
    key = (row.thread_id, row.checkpoint_ns, row.checkpoint_id)
    payload = (row.type, row.codec, row.checkpoint)
    if row.crc != checkpoint_crc(
        key, row.parent_id, row.run_id, payload, row.channels, row.versions
    ) or len(row.channels or ()) != len(row.versions or ()):
        reason = "the row does not match its checksum"
        raise corrupt(where, "checkpoint", key_path("checkpoints", *key), reason)
    if row.metadata_crc != metadata_crc(key, row.metadata):
        reason = "its metadata does not match its checksum"
        raise corrupt(where, "metadata", key_path("checkpoints", *key), reason)


def check_value(key: tuple[str, str], row: tuple[Any, ...], where: Where) -> StoredValue:
    """A ``blobs`` row (``VALUE_COLUMNS``) verified against its row checksum.

    Raises:
        CorruptCheckpointError: record ``"value"``.
    """
    value = StoredValue(*row[:7])
    if not isinstance(value.data, bytes) or row[7] != value_crc(*key, value):
        reason = "the row does not match its checksum"
        raise corrupt(where, "value", key_path("blobs", *key, *row[:2]), reason)
    return value


def check_writes(
    key: tuple[str, str, str],
    rows: list[tuple[Any, ...]],
    digest: tuple[Any, Any] | None,
    where: Where,
) -> None:
    """Verify the ``writes`` rows (``WRITE_COLUMNS``) of the checkpoint ``key``: each
    against its checksum, and all of them against the checkpoint's ``digest``
    (``writes_count``, ``writes_sum``; ``None``: the checkpoint row is not stored).

    Raises:
        CorruptCheckpointError: record ``"writes"``.
    """
    total = 0
    for row in rows:
        if row[7] != write_crc(key, row):
            reason = "the row does not match its checksum"
            raise corrupt(where, "writes", key_path("writes", *key, *row[:2]), reason)
        total += row[7]
    if digest is None:
        return
    count, stored_sum = digest
    if count != len(rows) or stored_sum != total:
        raise corrupt(
            where,
            "writes",
            key_path("writes", *key),
            f"the checkpoint's digest counts {count!r} pending writes, {len(rows)} were found "
            "(or they are not the ones it counted)",
        )

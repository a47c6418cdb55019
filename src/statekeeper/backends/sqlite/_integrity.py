"""Checksums of the SQLite checkpointer's rows, and the errors that report damage.

Every row a read turns into state carries a CRC-32 computed by the writer over the
bytes it already has (:func:`checksum`), verified by every read before anything in the
row is used:

* ``checkpoints.crc`` — the key, parent id, run id, the serialised checkpoint, its
  channel versions and ``values_count`` (how many of the values it names were stored
  when it was written); ``checkpoints.metadata_crc`` — the key and the metadata;
* ``blobs.row_crc`` — the key, type, codec, delta base and ``blobs.crc``, the CRC of the
  full payload, which the read checks on the payload it rebuilt (so the stored bytes,
  whole, compressed or a delta, are covered without hashing them twice);
* ``writes.crc`` — every column of the pending write.

What a row cannot say about itself is kept by the rows that list it, and checked on
read: ``checkpoints.writes_count`` / ``writes_sum`` (the number of the checkpoint's
write rows and the sum of their ``crc``, kept up to date by each ``put_writes`` by
increments, so a later write never blesses a lost one), ``values_count`` (a lost value
row), and the ``heads`` table (per thread and namespace: the newest checkpoint id and
the number of checkpoints, so a lost newest row or any lost row of a complete listing
is detected). These are checked against the rows they describe, so they need no
checksum of their own: damage to them shows up as a mismatch.

Rows written before checksums existed (schema version 3 and older) have ``NULL`` there.
In a database upgraded with such rows (``checkpoint_integrity.legacy_rows``), a row
without a checksum is read unverified, after a check of its shape (``verify()`` lists
them; ``verify(repair=True)`` checksums them and clears the count); in any other
database a missing checksum is damage.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

from statekeeper._storage.damage import Where, corrupt_error
from statekeeper._storage.damage import with_location as locate
from statekeeper._storage.deltas import StoredValue
from statekeeper.backends.sqlite._queries import CheckpointRow, Row, Rows
from statekeeper.checkpointers.records import PreparedPut
from statekeeper.errors import CorruptCheckpointError

__all__ = [
    "Where",
    "check_checkpoint",
    "check_key",
    "check_value",
    "check_writes",
    "checkpoint_crc",
    "checkpoint_row",
    "checksum",
    "corrupt",
    "is_text",
    "key_path",
    "metadata_crc",
    "text_keys",
    "value_crc",
    "with_location",
    "write_crc",
]


def checksum(*fields: object) -> int:
    """CRC-32 over ``fields``, framed so that no two different rows have the same input:
    a header lists each field's type and length (text in characters, bytes in bytes),
    then come the texts, then the bytes — a byte moved from one column to the next, a
    text turned into a blob, ``NULL`` into ``''``, all change it. Accepts whatever
    SQLite returns from a damaged row (text, bytes, integers, floats, ``None``)."""
    header: list[str] = []
    texts: list[str] = []
    chunks: list[bytes | bytearray] = []
    for field in fields:
        if isinstance(field, str):
            header.append(f"s{len(field)}")
            texts.append(field)
        elif isinstance(field, bytes | bytearray):  # serde may hand over a bytearray
            header.append(f"b{len(field)}")
            chunks.append(field)
        elif field is None:
            header.append("n")
        elif type(field) is int:
            header.append(f"i{field}")
        else:  # a float or anything else only comes from damage
            text = repr(field)
            header.append(f"{type(field).__name__}{len(text)}")
            texts.append(text)
    crc = zlib.crc32((",".join(header) + ";" + "".join(texts)).encode("utf-8", "surrogatepass"))
    for chunk in chunks:
        crc = zlib.crc32(chunk, crc)
    return crc


def checkpoint_crc(
    key: tuple[object, object, object],
    parent_id: object,
    run_id: object,
    payload: tuple[object, object, object],
    versions: object,
    values_count: object,
) -> int:
    """``checkpoints.crc``: everything in the row but the metadata and the writes digest."""
    return checksum(*key, parent_id, run_id, *payload, versions, values_count)


def checkpoint_row(prepared: PreparedPut, versions: str, values_count: int) -> Row:
    """The ``checkpoints`` row of a prepared put (without its writes digest), with its
    checksums: ``versions`` is its channel versions as stored (JSON), ``values_count``
    how many of them have a value row."""
    key = (prepared.thread_id, prepared.checkpoint_ns, prepared.checkpoint_id)
    parent, run = prepared.parent_id, prepared.run_id
    crc = checkpoint_crc(key, parent, run, prepared.checkpoint, versions, values_count)
    metadata = prepared.metadata_json
    return (
        *key,
        parent,
        run,
        *prepared.checkpoint,
        metadata,
        versions,
        values_count,
        crc,
        metadata_crc(key, metadata),
    )


def metadata_crc(key: tuple[object, object, object], metadata: object) -> int:
    """``checkpoints.metadata_crc``."""
    return checksum(*key, metadata)


def value_crc(thread_id: object, ns: object, value: StoredValue) -> int:
    """``blobs.row_crc``: the row's key and description; the payload is covered by
    ``value.crc`` (``blobs.crc``), checked on the payload every read rebuilds."""
    return checksum(
        thread_id, ns, value.channel, value.version, value.type, value.codec, value.base, value.crc
    )


def write_crc(row: tuple[object, ...]) -> int:
    """``writes.crc``: every other column of a ``writes`` row, in table order."""
    return checksum(*row)


def key_path(table: str, *key: object) -> str:
    """A row's ``Damage.path``: ``<table>:<key as a JSON list>``."""
    return f"{table}:{json.dumps(list(key), ensure_ascii=False, default=repr)}"


def corrupt(where: Where, record: str, path: str, reason: str) -> CorruptCheckpointError:
    """The error for damage found at ``path`` (a row, see :func:`key_path`)."""
    return corrupt_error("sqlite", _place(where), where, record, path, reason)


def _place(where: Where) -> str:
    return f"the SQLite database {where.database!r}"


def with_location(error: CorruptCheckpointError, where: Where) -> CorruptCheckpointError:
    """``error`` with the thread, namespace and checkpoint of ``where`` filled in where
    it names none (a driver error names only the database)."""
    return locate(error, where, _place(where))


# -- checks of rows as read -------------------------------------------------------------


def check_checkpoint(row: CheckpointRow, where: Where, *, legacy: bool) -> None:
    """Verify a ``checkpoints`` row against its checksums. ``legacy``: the database has
    rows written before checksums existed, and a row without any is read unverified
    (after a check of its shape); otherwise a missing checksum is damage.

    Raises:
        CorruptCheckpointError: record ``"checkpoint"`` or ``"metadata"``.
    """
    key = (row.thread_id, row.checkpoint_ns, row.checkpoint_id)
    if row.crc is None and legacy:
        _check_legacy_checkpoint(row, where, key_path("checkpoints", *key))
        return
    payload = (row.type, row.codec, row.checkpoint)
    if row.crc != checkpoint_crc(
        key, row.parent_id, row.run_id, payload, row.channel_versions, row.values_count
    ):
        reason = "the row does not match its checksum"
        raise corrupt(where, "checkpoint", key_path("checkpoints", *key), reason)
    if row.metadata_crc != metadata_crc(key, row.metadata):
        reason = "its metadata does not match its checksum"
        raise corrupt(where, "metadata", key_path("checkpoints", *key), reason)


def _check_legacy_checkpoint(row: CheckpointRow, where: Where, path: str) -> None:
    texts = (row.thread_id, row.checkpoint_ns, row.checkpoint_id, row.type, row.codec)
    if not (
        all(is_text(text) for text in texts)
        and (row.parent_id is None or is_text(row.parent_id))
        and type(row.checkpoint) is bytes
    ):
        raise corrupt(where, "checkpoint", path, "a column holds a value of the wrong type")
    for record, name, text in (
        ("metadata", "metadata", row.metadata),
        ("checkpoint", "channel versions", row.channel_versions),
    ):
        try:
            parsed = json.loads(text) if is_text(text) else None
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            raise corrupt(where, record, path, f"its {name} are not a JSON object")


def check_value(key: tuple[str, str], row: Row, where: Where, *, legacy: bool) -> StoredValue:
    """A ``blobs`` row (:data:`~._queries.VALUE_COLUMNS`) verified against its row
    checksum, as a :class:`StoredValue`; its payload is checked when it is rebuilt.

    Raises:
        CorruptCheckpointError: record ``"value"``.
    """
    value = StoredValue(*row[:7])
    row_crc = row[7]
    if type(value.data) is not bytes:  # the payload's own CRC is checked on its bytes
        reason = "its payload is not stored as bytes"
    elif row_crc is None and legacy:
        if all(is_text(text) for text in row[:4]):
            return value
        reason = "a column holds a value of the wrong type"
    elif row_crc == value_crc(*key, value):
        return value
    else:
        reason = "the row does not match its checksum"
    raise corrupt(where, "value", key_path("blobs", *key, *row[:2]), reason)


def check_writes(
    key: tuple[str, str, str],
    rows: Rows,
    digest: tuple[Any, Any] | None,
    where: Where,
    *,
    legacy: bool,
) -> None:
    """Verify the ``writes`` rows (:data:`~._queries.WRITE_COLUMNS`) read for the
    checkpoint ``key``: each against its checksum, and all of them against the
    checkpoint's ``digest`` (``writes_count``, ``writes_sum``), so a lost row is found;
    ``digest`` is ``None`` when the checkpoint row itself is not stored.

    Raises:
        CorruptCheckpointError: record ``"writes"``.
    """
    total = 0
    for row in rows:
        crc = row[10]
        if tuple(row[:3]) != key:
            reason = "a write row of another checkpoint was read"
        elif crc is None and legacy:
            if all(is_text(text) for text in (row[3], row[5], row[6], row[7], row[8])):
                continue
            reason = "a column holds a value of the wrong type"
        elif crc != write_crc(row[:10]):
            reason = "the row does not match its checksum"
        else:
            total += crc
            continue
        raise corrupt(where, "writes", key_path("writes", *row[:5]), reason)
    if digest is None or (digest[0] is None and legacy):
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


def check_key(found: tuple[Any, ...], wanted: tuple[Any, ...], where: Where, table: str) -> None:
    """Raise if a row read by its key has another key (a damaged index led elsewhere)."""
    if found != wanted:
        raise corrupt(
            where,
            "index",
            key_path(table, *wanted),
            f"the row found for this key is the row of {list(found)!r}",
        )


def text_keys(keys: list[Row], database: str, table: str) -> list[Row]:
    """``keys`` (rows of ids read to be used as parameters), refusing one that is not
    text: a damaged key can be neither used nor trusted.

    Raises:
        CorruptCheckpointError: record ``"index"``.
    """
    for key in keys:
        if not all(is_text(part) for part in key):
            where = Where(database, *(part if is_text(part) else None for part in key))
            reason = "a stored key is not valid text (damaged)"
            raise corrupt(where, "index", key_path(table, *key), reason)
    return keys


def is_text(value: object) -> bool:
    """Text that SQLite can be given back (a damaged row may read as text that is not
    UTF-8, see ``Database(lenient_text=True)``)."""
    if type(value) is not str:
        return False
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True

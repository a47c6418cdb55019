"""The Redis checkpointer's stored records, sealed on write and checked on read: a
checkpoint record (``cp``), a value or an append delta (``blobs``), a pending write
(``writes``). Each parser raises :class:`~.seal.Bad` for damage, which the reader places
(thread, checkpoint) and raises as :class:`~statekeeper.errors.CorruptCheckpointError`.
Everything here is pure.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.base import writes_sort_key
from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper._storage.deltas import StoredValue, rebuild_all
from statekeeper._storage.payload import decode, loads
from statekeeper.backends.redis._client import ordered, split_ordered
from statekeeper.backends.redis._client import unpack as unpack_parts
from statekeeper.backends.redis._integrity.seal import (
    SEAL,
    SEALED,
    Bad,
    body_start,
    check_head,
    seal,
)
from statekeeper.backends.redis._lua import WCOUNT
from statekeeper.checkpointers.base import TaskWrite
from statekeeper.errors import SerializationError

__all__ = [
    "Payloads",
    "Record",
    "decode_writes",
    "encode_value",
    "encode_write",
    "head",
    "parse_value",
]


@dataclass
class Record:
    """A checkpoint as the ``cp`` hash holds it, sealed (``_integrity.seal``): a header
    Lua reads (the run part, the value fields it references, its parent id), then type,
    codec, metadata JSON and the checkpoint itself (through ``serde``, without its
    channel values)."""

    run: bytes
    fields: list[bytes]
    nload: int
    parent: str | None
    type: str
    codec: str
    metadata: dict[str, Any]
    checkpoint: bytes
    sealed: bool = True

    @classmethod
    def parse(cls, data: bytes, ref: bytes) -> Record:
        """The record stored under ``ref``, its seal checked (a layout-1 record has none).

        Raises:
            Bad: it is damaged.
        """
        start = body_start(ref, data, "checkpoint", "cp")
        try:
            (run, nload, nextra), rest = unpack_parts(data, 3, start)
            count = _number(nload) + _number(nextra)
            parts, checkpoint = unpack_parts(rest, count + 4)
            parent, type_, codec, metadata = parts[count:]
            record = cls(
                run=run,
                fields=parts[:count],
                nload=_number(nload),
                parent=parent.decode() if parent else None,
                type=type_.decode(),
                codec=codec.decode(),
                metadata={},
                checkpoint=checkpoint,
                sealed=start > 0,
            )
        except ValueError as exc:
            raise Bad(f"the record cannot be read ({_why(exc)})", "checkpoint", "cp", ref) from None
        try:
            record.metadata = json.loads(metadata)
        except (ValueError, RecursionError) as exc:
            raise Bad(f"its metadata is not JSON ({exc})", "metadata", "cp", ref) from None
        if not isinstance(record.metadata, dict):
            raise Bad("its metadata is not a JSON object", "metadata", "cp", ref)
        return record

    @staticmethod
    def pack(
        ref: bytes,
        run: bytes,
        fields: tuple[list[bytes], list[bytes]],
        parent_id: str | None,
        metadata: str,
        checkpoint: tuple[str, str, bytes],
    ) -> bytes:
        """The record of a checkpoint, sealed for its field ``ref``. ``fields`` is
        ``(load, extra)``: it loads the values in ``load`` and also holds a reference on
        those in ``extra`` (values it wrote but does not load). ``checkpoint`` is
        ``(type, codec, bytes)`` as :func:`~statekeeper._storage.payload.encode` gives
        it; ``metadata`` its canonical JSON."""
        type_, codec, data = checkpoint
        load, extra = fields
        header = head(
            (
                run,
                b"%d" % len(load),
                b"%d" % len(extra),
                *load,
                *extra,
                parent_id.encode() if parent_id else b"",
                type_.encode(),
                codec.encode(),
                metadata.encode(),
            )
        )
        return seal(ref, header, data)


def head(parts: Sequence[bytes]) -> bytes:
    """``pack(*parts)`` (:func:`~._client.pack`) in one join."""
    pieces: list[bytes] = []
    for part in parts:
        pieces += (b"%d:" % len(part), part)
    return b"".join(pieces)


def encode_value(value_field: bytes, ens: bytes, stored: StoredValue) -> bytes:
    """A value as the ``blobs`` hash holds it under ``value_field``: type, codec, base
    field, the CRC of its full payload, bytes; sealed over its field and header (the
    payload CRC covers the bytes)."""
    base = b"" if stored.base is None else ens + ordered(stored.channel) + ordered(stored.base)
    checksum = b"" if stored.crc is None else b"%d" % stored.crc
    header = head((stored.type.encode(), stored.codec.encode(), base, checksum))
    return seal(value_field, header, stored.data, whole=False)


def parse_value(value_field: bytes, data: bytes) -> tuple[StoredValue, bytes]:
    """The value stored under ``value_field`` and the field of its base (``b""``: none),
    its seal checked; its bytes are checked against its payload CRC when rebuilt.

    Raises:
        Bad: it is damaged.
    """
    sealed = data[:1] == SEAL
    try:
        (type_, codec, base, checksum), payload = unpack_parts(data, 4, SEALED if sealed else 0)
        _, channel, version, _ = split_ordered(value_field)
        value = StoredValue(
            channel,
            version,
            type_.decode(),
            codec.decode(),
            payload,
            base.decode() or None,
            _number(checksum) if checksum else None,
        )
    except ValueError as exc:
        reason = f"the value cannot be read ({_why(exc)})"
        raise Bad(reason, "value", "blobs", value_field) from None
    if sealed:
        check_head(value_field, data, len(data) - len(payload), "value", "blobs")
        if value.crc is None:
            raise Bad("the value has no payload CRC", "value", "blobs", value_field)
    return value, base


class Payloads:
    """Rebuilds the values of one READ reply: each version once (the script sends a value
    once per reply and marks its repeats), values the caller holds from memory."""

    def __init__(self, known: dict[bytes, bytes] | None = None) -> None:
        self.known = known or {}
        self.memo: dict[bytes, tuple[str, bytes]] = {}  # value field -> (type, payload)

    def value(self, serde: SerializerProtocol, value_field: bytes, links: Sequence[Any]) -> Any:
        """The value stored under ``value_field``, given its chain from the script (itself,
        then the bases it is a delta on), rebuilt and checked against its CRC.

        Raises:
            Bad: a value of the chain is damaged or missing.
        """
        type_, data = self.payload(value_field, links)
        return loads(serde, type_, data)

    def payload(self, value_field: bytes, links: Sequence[Any]) -> tuple[str, bytes]:
        chain: list[StoredValue] = []
        fields: list[bytes] = []
        below: tuple[str, bytes] | None = None
        at = value_field
        for link in links:
            if isinstance(link, list):  # a mark (see the READ script's chain())
                below = self._mark(at, link)
                break
            value, base = parse_value(at, link)
            chain.append(value)
            fields.append(at)
            if not base:
                break
            at = base
        else:
            if not chain or chain[-1].base is not None:  # the chain stopped at a delta
                raise Bad("the value this delta is based on is missing", "delta", "blobs", at)
        if below is not None:
            self.memo[at] = below
        if chain:
            try:
                rebuilt = rebuild_all(chain, below[1] if below is not None else None)
            except SerializationError as exc:
                kind = "delta" if chain[0].base is not None else "value"
                raise Bad(str(exc), kind, "blobs", value_field) from None
            for at, value, data in zip(fields, chain, rebuilt, strict=True):
                self.memo[at] = (value.type, data)
        return self.memo[value_field]

    def _mark(self, at: bytes, link: list[Any]) -> tuple[str, bytes]:
        mark = link[1] if len(link) > 1 else None
        if mark == b"m" and at in self.memo:  # sent earlier in this reply
            return self.memo[at]
        if mark == b"=" and at in self.known:  # only lists are remembered: msgpack
            return ("msgpack", self.known[at])
        if mark == b"x":
            raise Bad("a value the checkpoint reads is missing from blobs", "value", "blobs", at)
        if mark == b"z":
            raise Bad("the value was emptied (its CRC is still in refs)", "value", "blobs", at)
        raise Bad("the values' base links form a loop or a chain too long", "delta", "refs", at)


def decode_writes(
    serde: SerializerProtocol,
    pairs: Sequence[bytes | None],
    channel: str | None = None,
    count: bytes | None = None,
    ref: bytes = b"",
) -> list[TaskWrite]:
    """Decoded writes from ``[field, value, ...]`` (of ``channel`` only, if given), in
    ``writes_sort_key`` order. ``count``: how many writes ``refs`` says the checkpoint
    ``ref`` has (``None``: no count, as layout 1 kept none).

    Raises:
        Bad: a write is damaged or missing, or there are fewer than ``count``.
    """
    rows = []
    sealed = False
    for i in range(0, len(pairs), 2):
        write_field, value = pairs[i] or b"", pairs[i + 1]
        if value is None:
            raise Bad("a write wix lists is missing from writes", "writes", "writes", write_field)
        start = body_start(write_field, value, "writes", "writes")
        sealed = sealed or start > 0
        try:
            _, _, task_id, idx = split_ordered(write_field)
            (ch, path, type_, codec), payload = unpack_parts(value, 4, start)
            row = (
                path.decode(),
                task_id,
                _number(idx),
                ch.decode(),
                type_.decode(),
                codec.decode(),
            )
        except ValueError as exc:
            reason = f"the write cannot be read ({_why(exc)})"
            raise Bad(reason, "writes", "writes", write_field) from None
        if channel is None or row[3] == channel:
            rows.append((row, payload, write_field, start > 0))
    if count is not None and count != b"%d" % (len(pairs) // 2):
        raise Bad(
            f"{len(pairs) // 2} writes are listed where {count.decode(errors='replace')} were "
            "stored (a write or its wix member was deleted)",
            "writes",
            "wix",
            ref,
        )
    if count is None and sealed:
        raise Bad("the count of its writes is missing from refs", "index", "refs", WCOUNT + ref)
    rows.sort(key=lambda r: writes_sort_key(r[0][0], r[0][1], r[0][2]))
    return [
        TaskWrite(task_id, path, ch, _decoded(serde, (t, c, payload), write_field, sealed))
        for (path, task_id, _, ch, t, c), payload, write_field, sealed in rows
    ]


def _decoded(
    serde: SerializerProtocol, payload: tuple[str, str, bytes], field: bytes, sealed: bool
) -> Any:
    """A stored payload decoded. One that fails although its seal matched was written
    with another serde (SerializationError); a layout-1 one, with no seal, is damaged."""
    try:
        return decode(serde, *payload)
    except SerializationError as exc:
        if sealed:
            raise
        raise Bad(f"it cannot be decoded ({exc})", "writes", "writes", field) from None


def encode_write(
    write_field: bytes, channel: str, task_path: str, type_: str, codec: str, data: bytes
) -> bytes:
    """A pending write as the ``writes`` hash holds it under ``write_field`` (which holds
    its task id and index), sealed: channel, task path, type, codec, bytes."""
    header = head((channel.encode(), task_path.encode(), type_.encode(), codec.encode()))
    return seal(write_field, header, data)


def _number(text: bytes | str) -> int:
    """A count, index or checksum of a stored record.

    Raises:
        ValueError: it is not a number, said in words (int() would quote the bytes).
    """
    try:
        return int(text)
    except ValueError:
        raise ValueError("a count, index or checksum in it is not a number") from None


def _why(exc: ValueError) -> str:
    """Why a record's parts cannot be read, in words: decode() says "'utf-8' codec can't
    decode byte 0xff in position 0: ..."; the others already are."""
    return "a name in it is not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else str(exc)

"""Checksums of the Redis checkpointer's stored records, and the damage reports built
from what fails them.

Layout 2 stores every record a read turns into state sealed: the byte ``SEAL``
(``\\xfe``: no layout-1 record starts with it, they start with a decimal length), the
CRC-32 of the field the record is stored under followed by its body (4 bytes,
big-endian), then the body. So a record altered, truncated, or put under another field
fails its check. A value's seal covers its field and its header (type, codec, base, the
CRC of its full payload): its bytes are covered by that payload CRC, checked once the
value is rebuilt, so they are not summed twice. Records written by layout 1 carry no seal
and are read as before (``verify(repair=True)`` seals them).

Everything here is pure, except :func:`wrong_types`, an operation (see ``_io``).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

from statekeeper.backends.redis._io import Batch, Cmd, Op
from statekeeper.errors import CorruptCheckpointError, Damage

__all__ = [
    "BACKEND",
    "KEY_TYPES",
    "KINDS",
    "SEAL",
    "SEALED",
    "Bad",
    "body_start",
    "check_head",
    "corrupt",
    "damage",
    "damaged_reply",
    "escape",
    "path",
    "seal",
    "wrong_type",
    "wrong_types",
]

SEAL = b"\xfe"
SEALED = 5  # bytes before the body of a sealed record: SEAL and the CRC
BACKEND = "redis"
# what each key of a thread holds (the ``record`` of a Damage found in it) and its type
KINDS = {
    "ids": "index",
    "ns": "index",
    "cp": "checkpoint",
    "blobs": "value",
    "refs": "index",
    "writes": "writes",
    "wix": "index",
    "runs": "index",
}
KEY_TYPES = {
    "ids": b"zset",
    "ns": b"zset",
    "cp": b"hash",
    "blobs": b"hash",
    "refs": b"hash",
    "writes": b"hash",
    "wix": b"zset",
    "runs": b"zset",
}


def seal(field: bytes, head: bytes, tail: bytes = b"", *, whole: bool = True) -> bytes:
    """``head + tail`` sealed for ``field``: one CRC over the field and the body (only
    the head when not ``whole``: a value, whose tail the CRC of its payload covers), and
    a single join (the tail, usually the largest part, is copied once)."""
    checksum = zlib.crc32(head, zlib.crc32(field))
    if whole:
        checksum = zlib.crc32(tail, checksum)
    return b"".join((SEAL, checksum.to_bytes(4, "big"), head, tail))


def check_head(field: bytes, data: bytes, end: int, record: str, key: str) -> None:
    """Check the seal of a record sealed over its head only (``data[SEALED:end]``).

    Raises:
        Bad: it does not match.
    """
    crc = zlib.crc32(memoryview(data)[SEALED:end], zlib.crc32(field))
    if crc != int.from_bytes(data[1:SEALED], "big"):
        raise Bad("checksum mismatch (altered or truncated)", record, key, field)


class Bad(Exception):
    """Damage in one stored record or index entry, before the reader places it: ``key``
    names the thread key holding it (one of ``THREAD_KEYS``), ``field`` the field or
    member, ``record`` its kind (see :class:`~statekeeper.errors.Damage`)."""

    def __init__(self, reason: str, record: str, key: str, field: bytes | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.record = record
        self.key = key
        self.field = field


def body_start(field: bytes, data: bytes, record: str, key: str) -> int:
    """Where the body of a stored record begins: ``SEALED`` for a sealed record whose
    checksum matches, 0 for a layout-1 record (no seal).

    Raises:
        Bad: the record is sealed and its checksum does not match (or it is too short to
            hold one): altered, truncated, or stored under another field.
    """
    if data[:1] != SEAL:
        return 0
    stored = int.from_bytes(data[1:SEALED], "big")
    if len(data) < SEALED or zlib.crc32(memoryview(data)[SEALED:], zlib.crc32(field)) != stored:
        raise Bad("checksum mismatch (altered or truncated)", record, key, field)
    return SEALED


def escape(data: bytes) -> str:
    """Bytes as text that ``redis-cli`` reads back inside double quotes (``\\xNN``)."""
    text = data.decode("latin-1").encode("unicode_escape").decode("ascii")
    return text.replace('"', '\\"')


def path(key: bytes, field: bytes | None = None) -> str:
    """``<key>[:<field>]``, the ``path`` of a Damage (the field escaped, see
    :func:`escape`)."""
    name = escape(key)
    return name if field is None else f"{name}:{escape(field)}"


def damage(
    bad: Bad,
    keys: dict[str, bytes],
    thread_id: str | None,
    ns: str | None = None,
    checkpoint_id: str | None = None,
) -> Damage:
    """The Damage ``bad`` is, placed: ``keys`` maps key names to the thread's keys."""
    return Damage(
        reason=bad.reason,
        backend=BACKEND,
        thread_id=thread_id,
        checkpoint_ns=ns,
        checkpoint_id=checkpoint_id,
        record=bad.record,
        path=path(keys.get(bad.key, bad.key.encode()), bad.field),
    )


def corrupt(found: Damage) -> CorruptCheckpointError:
    """The error a read raises for ``found``: one line naming what, where and what to do."""
    if found.checkpoint_id is not None:
        what = (
            f"checkpoint {found.checkpoint_id!r} of thread {found.thread_id!r} "
            f"(namespace {found.checkpoint_ns!r}) in Redis is damaged"
        )
        advice = "restore it from a backup, or open with on_corrupt=fallback to read older ones"
    else:
        what = "Redis data is damaged"
        if found.thread_id is not None:
            what = f"thread {found.thread_id!r} in Redis is damaged"
        advice = "run verify() to list the damage, verify(repair=True) to rebuild indexes"
    return CorruptCheckpointError(f"{what}: {found.reason} at {found.path}; {advice}", found)


def wrong_type(exc: BaseException) -> bool:
    """Whether ``exc`` (a StorageError) comes from a key holding the wrong type."""
    return "WRONGTYPE" in str(exc.__cause__ or "")


def wrong_types(
    threads: Sequence[tuple[str, Sequence[bytes]]], registry: bytes | None
) -> Op[CorruptCheckpointError | None]:
    """The error for the first key of these threads (``(thread id, keys in THREAD_KEYS
    order)``), or of the registry, holding another type than the layout gives it (a
    WRONGTYPE reply met it); ``None`` if none does (the key was fixed meanwhile)."""
    names = tuple(KEY_TYPES)
    calls = [Cmd(("TYPE", registry))] if registry is not None else []
    for _, keys in threads:
        calls += [Cmd(("TYPE", key)) for key in keys]
    types = [_text(kind) for kind in (yield Batch(tuple(calls)))] if calls else []
    if registry is not None and types.pop(0) not in ("zset", "none"):
        reason = "the registry of threads holds another type than a sorted set"
        found = Damage(reason, BACKEND, None, record="index", path=path(registry))
        return CorruptCheckpointError(
            f"Redis key {found.path} is damaged: {reason} (it was overwritten by another "
            "program); restore it from a backup",
            found,
        )
    at = 0
    for thread_id, keys in threads:
        for name in names:
            kind, at = types[at], at + 1
            if kind not in ("none", KEY_TYPES[name].decode()):
                reason = (
                    f"the key holds a {kind}, not a {_KIND_NAMES[KEY_TYPES[name]]} (it was "
                    "overwritten by another program)"
                )
                bad = Bad(reason, KINDS[name], name)
                return corrupt(damage(bad, dict(zip(names, keys, strict=True)), thread_id))
    return None


def damaged_reply(exc: BaseException) -> tuple[str, bytes] | None:
    """``(key name, field)`` from a script's ``STATEKEEPER-DAMAGED`` error reply (a
    record it could not read), else ``None``."""
    found = _DAMAGED.search(str(exc.__cause__ or ""))
    return (found[1], bytes.fromhex(found[2])) if found else None


_DAMAGED = re.compile(r"STATEKEEPER-DAMAGED (\w+) ((?:[0-9a-f]{2})*)")
_KIND_NAMES = {b"zset": "sorted set", b"hash": "hash"}


def _text(reply: bytes | str) -> str:
    return reply.decode() if isinstance(reply, bytes) else reply

"""The lines of the ``checkpoints`` and ``writes`` logs.

Both logs are text files of the same shape: a header line, then lines sorted by
checkpoint id. A line is the first 16 hex digits of the SHA-256 of the rest of the line,
a space, and the rest: in format 3, the checksum of the line before (its first 16
characters), a space and the JSON; in format 2 (written before there were heads) just
the JSON::

    9c0e...4d1a {"checkpoint_ns":"","format":"statekeeper-checkpoints","generation":1,...}
    51f2...07bb 9c0e...4d1a {"checkpoint_id":"1f0c...","parent_checkpoint_id":null,...}
    a4b1...99e0 51f2...07bb {"checkpoint_id":"1f0d...","parent_checkpoint_id":"1f0c...",...}

So every line is checked by itself, and a line that follows another names it: a line
deleted from the middle, or lines spliced from elsewhere, break the chain. The header
starts the chain; its ``generation`` grows with every rewrite of the log (see
:mod:`.head`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from json.encoder import encode_basestring_ascii
from typing import Any, NamedTuple

__all__ = [
    "CHECKPOINTS",
    "FORMATS",
    "ID_HEAD",
    "RECORDS",
    "VERSION",
    "WRITES",
    "DamagedIndex",
    "Entry",
    "Lost",
    "digest",
    "dumps",
    "excerpt",
    "header_line",
    "id_in",
    "intact",
    "json_start",
    "line",
    "make_entry",
    "parser",
    "prev_of",
    "unline",
]

CHECKPOINTS = "checkpoints"  # the kinds of log, also their file names
WRITES = "writes"
FORMATS = {CHECKPOINTS: "statekeeper-checkpoints", WRITES: "statekeeper-writes"}
VERSION = 3  # of the headers written now; format 2 logs are read (and appended to) too
_DIGEST = 16  # hex digits of a line's checksum
ID_HEAD = 300  # bytes of a line read to find its checkpoint id (a longer id: read it all)
# what each kind of log's lines are, for Damage.record
RECORDS = {CHECKPOINTS: "checkpoint", WRITES: "writes"}


class Entry(NamedTuple):
    """One line: its ids, the whole record, and the JSON as stored; once read from a log,
    also the line's checksum and the checksum it chains to (``None`` for a format 2
    line). A ``writes`` line has no parent or run id."""

    checkpoint_id: str
    parent_id: str | None
    run_id: str | None
    record: dict[str, Any]
    raw: bytes
    digest: bytes = b""
    prev: bytes | None = None

    @property
    def deleted(self) -> bool:
        """Whether this is a deleted checkpoint's line, kept only for the values stored in
        it that remaining checkpoints use (no metadata, never listed or loaded)."""
        return self.record.get("deleted") is True


class DamagedIndex(Exception):
    """A line, the header, the head or the log as a whole is not what was committed;
    ``str()`` says how, ``checkpoint_id`` whose line it was when that can still be read,
    ``record`` the kind of record at fault (:class:`~statekeeper.errors.Damage`)."""

    def __init__(
        self, reason: str, checkpoint_id: str | None = None, record: str = "checkpoint"
    ) -> None:
        super().__init__(reason)
        self.checkpoint_id = checkpoint_id
        self.record = record


def dumps(value: Any) -> str:
    """Canonical JSON: ASCII, keys sorted, no spaces. Texts, ``None`` and integers, most
    of what a line holds, are formatted directly, to the text json makes (a text by the
    encoder json itself calls)."""
    kind = type(value)
    if kind is str:
        return encode_basestring_ascii(value)
    if value is None:
        return "null"
    if kind is int:
        return str(value)
    return json.dumps(
        value, ensure_ascii=True, sort_keys=True, allow_nan=False, separators=(",", ":")
    )


def digest(data: bytes) -> bytes:
    """The checksum of ``data``: the first 16 hex digits of its SHA-256."""
    return hashlib.sha256(data).hexdigest()[:_DIGEST].encode("ascii")


def line(raw: bytes, prev: bytes | None) -> bytes:
    """The line holding the JSON ``raw``, chained to the line whose checksum is ``prev``
    (``None``: a header, which starts the chain)."""
    rest = raw if prev is None else prev + b" " + raw
    return digest(rest) + b" " + rest + b"\n"


def header_line(kind: str, thread_id: str, ns: str, generation: int) -> bytes:
    header = {"format": FORMATS[kind], "version": VERSION, "generation": generation}
    header.update(thread_id=thread_id, checkpoint_ns=ns)
    return line(dumps(header).encode("ascii"), None)


def json_start(data: bytes) -> int:
    """Where the JSON starts in a line beginning with ``data`` (at least 35 bytes of it,
    when there are that many): after the checksum, and in format 3 the chained one."""
    return _DIGEST + 1 if data[_DIGEST + 1 : _DIGEST + 2] == b"{" else 2 * (_DIGEST + 1)


def prev_of(data: bytes) -> bytes | None:
    """The checksum a line beginning with ``data`` chains to (None: a format 2 line, or a
    header); ``data`` holds at least its first 34 bytes, when it has them."""
    return None if json_start(data) == _DIGEST + 1 else data[_DIGEST + 1 : 2 * _DIGEST + 1]


def intact(data: bytes) -> bool:
    """Whether one line (without its newline) passes its checksum (its JSON unread)."""
    return data[_DIGEST : _DIGEST + 1] == b" " and digest(data[_DIGEST + 1 :]) == data[:_DIGEST]


def unline(data: bytes) -> tuple[bytes, bytes | None, Any]:
    """``(checksum, chained checksum or None, JSON)`` of one line (without its newline),
    after checking its checksum.

    Raises:
        DamagedIndex: the checksum does not match, or the JSON does not parse.
    """
    start = json_start(data)
    raw = data[start:]
    rest = data[_DIGEST + 1 :]
    if len(data) <= start or data[_DIGEST : _DIGEST + 1] != b" " or digest(rest) != data[:_DIGEST]:
        raise DamagedIndex(f"damaged line {excerpt(raw)}: checksum mismatch", id_in(raw))
    try:
        return data[:_DIGEST], prev_of(data), json.loads(raw)
    except ValueError as exc:
        raise DamagedIndex(f"damaged line {excerpt(raw)}: {exc}", id_in(raw)) from None


def id_in(raw: bytes) -> str | None:
    """The checkpoint id at the start of a line's JSON, if it can still be read."""
    prefix = b'{"checkpoint_id":'
    if not raw.startswith(prefix):
        return None
    end = raw.find(b",", len(prefix))
    try:
        found = json.loads(raw[len(prefix) : end])
    except ValueError:
        return None
    return found if isinstance(found, str) else None


def excerpt(raw: bytes) -> str:
    """A line's checkpoint id if it can still be read, else its first bytes."""
    found = id_in(raw)
    return f"of checkpoint {found!r}" if found is not None else repr(bytes(raw[:40]))


def make_entry(record: dict[str, Any]) -> Entry:
    """The entry for ``record`` (``checkpoint_id`` first, then ``parent_checkpoint_id``,
    ``run_id``, ``metadata`` and the rest), its JSON keys in that readable order.

    Raises:
        TypeError, ValueError: a value is not JSON.
    """
    raw = "{" + ",".join(f"{dumps(key)}:{dumps(value)}" for key, value in record.items()) + "}"
    return Entry(
        record["checkpoint_id"],
        record.get("parent_checkpoint_id"),
        record.get("run_id"),
        record,
        raw.encode("ascii"),
    )


class Lost(NamedTuple):
    """Committed lines of a log that may be missing: those with checkpoint ids from
    ``low`` to ``high`` (``None``: no bound), and the damage that says so."""

    damage: DamagedIndex
    low: str | None = None
    high: str | None = None

    def covers(self, checkpoint_id: str) -> bool:
        return (self.low is None or self.low <= checkpoint_id) and (
            self.high is None or checkpoint_id <= self.high
        )


# what each kind of line must hold besides its checkpoint id, and of which type
_FIELDS = {
    CHECKPOINTS: {"metadata": dict, "channel_versions": dict, "values": dict, "stored": list},
    WRITES: {"task_id": str, "task_path": str, "writes": list},
}


def parser(kind: str) -> Callable[[bytes], Entry]:
    """The parser of one line (without its newline) of a ``kind`` log.

    The parser raises :class:`DamagedIndex` for a line that fails its checksum or is not
    a ``kind`` line.
    """
    fields = _FIELDS[kind]
    record_kind = RECORDS[kind]

    def parse(data: bytes) -> Entry:
        try:
            checksum, prev, record = unline(data)
        except DamagedIndex as damage:
            damage.record = record_kind
            raise
        raw = data[json_start(data) :]
        try:
            ids = record["checkpoint_id"], record.get("parent_checkpoint_id"), record.get("run_id")
            if not all(i is None or isinstance(i, str) for i in ids) or ids[0] is None:
                raise TypeError("ids must be strings")
            wanted = {"stored": list} if record.get("deleted") is True else fields
            for key, type_ in wanted.items():
                if not isinstance(record[key], type_):
                    raise TypeError(f"{key} is not a {type_.__name__}")
        except (KeyError, TypeError, AttributeError) as exc:
            reason = f"damaged line {excerpt(raw)}: not a {kind} line ({exc})"
            raise DamagedIndex(reason, id_in(raw), record_kind) from None
        return Entry(*ids, record, raw, checksum, prev)

    return parse

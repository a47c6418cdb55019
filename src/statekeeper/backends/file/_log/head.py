"""The head of a log: how far its committed lines reach, kept apart from the log.

``checkpoints.head`` beside ``checkpoints`` (``writes.head`` beside ``writes``) holds two
slots of :data:`SLOT` bytes, each ``statekeeper-head <checksum> <JSON>`` padded with
spaces to a newline::

    statekeeper-head 5c1d...e2a0 {"end":48210,"generation":1,"last":"a4b1...99e0",
                                  "lines":37,"log":"checkpoints","newest":"1f0d...","seq":38}

``end`` is the length of the committed log, ``last`` the checksum of its last line
(ending at ``end``; the header's when there is none), ``lines`` how many lines it has,
``newest`` the checkpoint id of the last line (``null`` when there is none, or when the
id is too long to keep here), ``generation`` the one in the log's header. A writer
updates the head after its line is durable, in place: the slot ``seq % 2``, so a torn
update (a power loss in the middle of it) leaves the other slot, one line behind, and a
reader takes the intact slot with the greater ``seq``. The update is not flushed by
itself — that would double the flushes of every ``put`` — so after a power loss the head
may lag the log by its last lines; a reader accepts lines past the head when they follow
it by the chain of checksums (:mod:`.lines`), and the next writer brings it up to date.

A log shorter than its head, or whose line at ``end`` is not ``last``, or whose header
has an older generation than its head (a stale copy put back), lost committed lines:
that is damage. A rewrite (a new generation) writes its head whole, by a rename, after
the new log; a log one generation ahead of its head is such a rewrite interrupted
before its head was written, and is taken as it is.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import NamedTuple

from statekeeper._storage.files import replace_file
from statekeeper.backends.file._log.lines import DamagedIndex, digest, dumps

__all__ = [
    "SLOT",
    "SUFFIX",
    "Head",
    "head_newest",
    "head_path",
    "initial_head",
    "kept",
    "parse_slots",
    "read_head",
    "slot_bytes",
    "write_head",
]

SUFFIX = ".head"
SLOT = 512  # bytes per slot: a sector, so a slot is written whole or not at all
_MAGIC = b"statekeeper-head "
_NEWEST_LIMIT = 200  # characters of JSON: a longer checkpoint id is not kept in the head


class Head(NamedTuple):
    """One slot of a head (see the module docstring)."""

    seq: int
    generation: int
    end: int
    last: bytes  # 16 hex digits
    lines: int
    newest: str | None
    kind: str


def kept(newest: str | None) -> str | None:
    """``newest`` as a head keeps it: left out when it is too long."""
    return newest if newest is None or len(dumps(newest)) <= _NEWEST_LIMIT else None


def head_path(log: Path) -> Path:
    """The head of the log at ``log``."""
    return log.with_name(log.name + SUFFIX)


def slot_bytes(head: Head) -> bytes:
    """The slot ``head`` is written as (what :func:`write_head` writes)."""
    return _slot(head)


def _slot(head: Head) -> bytes:
    # the JSON dumps() would make (keys sorted), formatted directly: written at every put
    last = dumps(head.last.decode("latin-1"))
    raw = (
        f'{{"end":{head.end},"generation":{head.generation},"last":{last},'
        f'"lines":{head.lines},"log":{dumps(head.kind)},"newest":{dumps(head.newest)},'
        f'"seq":{head.seq}}}'
    ).encode("ascii")
    data = _MAGIC + digest(raw) + b" " + raw
    if len(data) >= SLOT:  # cannot happen: newest is capped
        raise ValueError("a head slot overflowed")
    return data.ljust(SLOT - 1, b" ") + b"\n"


@functools.lru_cache(maxsize=1024)  # a head is read at every open of its log
def _parse(data: bytes, kind: str) -> Head | None:
    """The head in one slot, or None if the slot is not intact."""
    body = data.rstrip(b" \n")
    check, raw = body[len(_MAGIC) : len(_MAGIC) + 16], body[len(_MAGIC) + 17 :]
    if not body.startswith(_MAGIC) or digest(raw) != check:
        return None
    try:
        found = json.loads(raw)
        head = Head(
            found["seq"],
            found["generation"],
            found["end"],
            found["last"].encode("latin-1"),
            found["lines"],
            found["newest"],
            found["log"],
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    ints = (head.seq, head.generation, head.end, head.lines)
    if not all(type(i) is int and i >= 0 for i in ints) or head.kind != kind:
        return None
    return head


def parse_slots(data: bytes, kind: str) -> list[Head | None]:
    """Both slots of a head file's bytes (None for a slot that is not intact)."""
    return [_parse(data[i * SLOT : (i + 1) * SLOT], kind) for i in range(2)]


def read_head(fd: int, path: Path, kind: str) -> Head:
    """The newest intact slot of the head open on ``fd`` (at ``path``).

    Raises:
        DamagedIndex: no slot is intact, or it is a directory (record ``"head"``).
    """
    try:
        data = os.pread(fd, 2 * SLOT, 0)
    except IsADirectoryError:  # opening one to read succeeds; this error names no path
        raise DamagedIndex(f"its head {path.name} is a directory", record="head") from None
    slots = [data[:SLOT], data[SLOT : 2 * SLOT]]
    # check the slot that says it is newer first: usually the only one parsed
    slots.sort(key=_claimed_seq, reverse=True)
    for slot in slots:
        if (head := _parse(slot, kind)) is not None:
            return head
    raise DamagedIndex(f"its head {path.name} is damaged (no intact slot)", record="head")


def _claimed_seq(slot: bytes) -> int:
    """The ``seq`` a slot shows, unchecked (-1 if none can be read): which slot to check
    first. A slot claiming more than it has fails its own checksum when it is parsed."""
    at = slot.find(b'"seq":')
    if at == -1:
        return -1
    digits = slot[at + 6 : at + 26].split(b"}")[0].split(b",")[0]
    return int(digits) if digits.isdigit() else -1


def write_head(fd: int, head: Head) -> None:
    """Write ``head`` into its slot, in place (not flushed: see the module docstring)."""
    os.pwrite(fd, _slot(head), (head.seq % 2) * SLOT)


def initial_head(path: Path, head: Head, *, durable: bool) -> None:
    """(Re)write the head at ``path`` whole, both slots ``head``, atomically (a rename)."""
    replace_file(path, _slot(head) * 2, durable=durable)


def head_newest(log: Path) -> str | None:
    """The id of ``log``'s last line as its head says, if the log ends where the head
    says (no line past it, no rewrite under way); else ``None``: read the log. The last
    line is never a deleted one (a deleted line is kept only for newer checkpoints)."""
    try:
        fd = os.open(head_path(log), os.O_RDONLY)
        try:
            head = read_head(fd, log, "checkpoints")
        finally:
            os.close(fd)
        size = log.stat().st_size
    except (OSError, DamagedIndex):
        return None
    return head.newest if head.newest and head.lines and size == head.end else None

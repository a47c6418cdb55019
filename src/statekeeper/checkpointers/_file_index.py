"""The file checkpointer's ``checkpoints`` file: every checkpoint of one (thread, namespace).

A text file: a header line, then one line per checkpoint, sorted by checkpoint id. Each
line is the first 16 hex digits of the SHA-256 of its JSON, a space, and the JSON::

    9c0e...4d1a {"checkpoint_ns":"","format":"statekeeper-checkpoints","thread_id":"t-1",...}
    51f2...07bb {"checkpoint_id":"1f0c...","parent_checkpoint_id":"1f0b...","run_id":null,
                 "metadata":{...},"channel_versions":{...},"values":[...],"type":"msgpack",
                 "codec":"","checkpoint":"<the checkpoint without its values, base64>"}

A checkpoint exists exactly when its line does. The writer appends the line (and flushes
it) only after every value file the checkpoint needs is durable, so the append is the
commit: a crash before it leaves value files nothing uses, a crash during it leaves a
torn tail — bytes after the last newline — which readers ignore and the next writer cuts
off. A complete line that fails its checksum, wherever it is, is damage: it raises
:class:`DamagedIndex` (or is skipped, when reading leniently) and is never cut off.

Reads never scan the file: the newest lines are read backwards from the end, and
``before`` / lookups by id bisect the sorted lines, so their cost does not grow with the
number of checkpoints. Appending is the common write (ids grow); an id below the last one,
a replaced checkpoint or a deletion rewrites the file atomically.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from statekeeper._files import flush, replace_file, sync_dir

__all__ = ["DamagedIndex", "Entry", "IndexView", "commit", "create", "make_entry", "rewrite"]

FORMAT = "statekeeper-checkpoints"
VERSION = 1
_BLOCK = 8192  # bytes read at once; most lines are well under 1 KiB


class Entry(NamedTuple):
    """One checkpoint line: its ids, the whole record, and the JSON as stored."""

    checkpoint_id: str
    parent_id: str | None
    run_id: str | None
    record: dict[str, Any]
    raw: bytes


class DamagedIndex(Exception):
    """A line (or the header) fails its checksum or does not parse; ``str()`` says how."""


def _dumps(value: Any) -> str:
    return json.dumps(
        value, ensure_ascii=True, sort_keys=True, allow_nan=False, separators=(",", ":")
    )


def _digest(raw: bytes) -> bytes:
    return hashlib.sha256(raw).hexdigest()[:16].encode("ascii")


def _line(raw: bytes) -> bytes:
    return _digest(raw) + b" " + raw + b"\n"


def header_line(thread_id: str, ns: str) -> bytes:
    header = {"format": FORMAT, "version": VERSION, "thread_id": thread_id, "checkpoint_ns": ns}
    return _line(_dumps(header).encode("ascii"))


def make_entry(record: dict[str, Any]) -> Entry:
    """The entry for ``record`` (``checkpoint_id``, ``parent_checkpoint_id``, ``run_id``,
    ``metadata`` and the rest), its JSON keys in that readable order.

    Raises:
        TypeError, ValueError: a value is not JSON.
    """
    raw = "{" + ",".join(f"{_dumps(key)}:{_dumps(value)}" for key, value in record.items()) + "}"
    return Entry(
        record["checkpoint_id"],
        record["parent_checkpoint_id"],
        record["run_id"],
        record,
        raw.encode("ascii"),
    )


def _unline(line: bytes) -> Any:
    """The JSON of one line (without its newline), after the checksum check."""
    raw = line[17:]
    if len(line) < 18 or line[16:17] != b" " or _digest(raw) != line[:16]:
        raise DamagedIndex(f"damaged line {_excerpt(raw)}: checksum mismatch")
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise DamagedIndex(f"damaged line {_excerpt(raw)}: {exc}") from None


def _excerpt(raw: bytes) -> str:
    """A line's checkpoint id if it can still be read, else its first bytes."""
    at = raw.find(b'"checkpoint_id":"')
    if at != -1:
        end = raw.find(b'"', at + 17)
        return f"of checkpoint {raw[at + 17 : end].decode('ascii', 'replace')!r}"
    return repr(bytes(raw[:40]))


def _entry(line: bytes) -> Entry:
    record = _unline(line)
    try:
        ids = record["checkpoint_id"], record["parent_checkpoint_id"], record["run_id"]
        if not isinstance(ids[0], str) or not all(i is None or isinstance(i, str) for i in ids):
            raise TypeError("ids must be strings")
        dict(record["metadata"]), dict(record["channel_versions"]), list(record["values"])
    except (KeyError, TypeError, ValueError) as exc:
        reason = f"damaged line {_excerpt(line[17:])}: not a checkpoint ({exc})"
        raise DamagedIndex(reason) from None
    return Entry(*ids, record, line[17:])


class IndexView:
    """One open ``checkpoints`` file: a consistent snapshot while it is open.

    ``on_damage``, when given, is called with each damaged line, which is then skipped
    (lenient reading); without it, a damaged line raises :class:`DamagedIndex`.
    ``writable`` opens it for :meth:`append` (the caller holds the thread's lock).
    """

    def __init__(
        self,
        path: Path,
        on_damage: Callable[[DamagedIndex], None] | None = None,
        *,
        writable: bool = False,
    ) -> None:
        self.path = path
        self.on_damage = on_damage
        self._fd = os.open(path, os.O_RDWR if writable else os.O_RDONLY)  # FileNotFoundError
        self._cache = (0, b"")  # (offset, bytes): the last block read
        try:
            self.size = os.fstat(self._fd).st_size
            header_end = self._find_newline(0)
            if header_end is None:
                raise DamagedIndex("the header line is missing or torn")
            self._header_raw = self._read(0, header_end)
            self.data_start = header_end + 1
            self.last: Entry | None = None  # the newest intact entry
            self._last_end = 0
            self.valid_end = self._valid_end()
        except BaseException:
            os.close(self._fd)
            raise

    def __enter__(self) -> IndexView:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self._fd)

    # -- low-level reading ------------------------------------------------------------

    def _read(self, start: int, end: int) -> bytes:
        """Bytes [start, end), served from one cached block around them when possible."""
        offset, block = self._cache
        if offset <= start and end <= offset + len(block):
            return block[start - offset : end - offset]
        if end - start > _BLOCK:
            return os.pread(self._fd, end - start, start)
        # centre the block on the request: readers walk backwards, bisection both ways
        offset = max(0, min(start, end - _BLOCK // 2, self.size - _BLOCK))
        block = os.pread(self._fd, _BLOCK, offset)
        self._cache = (offset, block)
        return block[start - offset : end - offset]

    def _find_newline(self, start: int) -> int | None:
        """Offset of the first newline at or after ``start``, or None before the end."""
        while start < self.size:
            chunk = self._read(start, min(self.size, start + 512))
            at = chunk.find(b"\n")
            if at != -1:
                return start + at
            start += len(chunk)
        return None

    def _line_start_before(self, end: int) -> int:
        """Start of the line whose newline is at ``end - 1`` (or of the bytes before
        ``end`` when ``end - 1`` is not a newline: a torn tail)."""
        pos = end - 1
        while pos > self.data_start:
            lo = max(self.data_start, pos - 512)
            at = self._read(lo, pos).rfind(b"\n")
            if at != -1:
                return lo + at + 1
            pos = lo
        return self.data_start

    def _valid_end(self) -> int:
        """End of the last complete line. Bytes after the last newline are a torn tail
        (what a crash during an append leaves: the line was never acknowledged) and not
        part of the content. Also finds :attr:`last`, the newest intact entry."""
        end = self.size
        if end > self.data_start and self._read(end - 1, end) != b"\n":
            end = self._line_start_before(end)
        at = end
        while at > self.data_start and self.last is None:
            self._last_end = at
            at, self.last = self._entry_ending_at(at)
        return end

    def _entry_ending_at(self, end: int) -> tuple[int, Entry | None]:
        start = self._line_start_before(end)
        try:
            return start, _entry(self._read(start, end - 1))
        except DamagedIndex as damage:
            self._damaged(damage)
            return start, None

    def _damaged(self, damage: DamagedIndex) -> None:
        if self.on_damage is None:
            raise damage
        self.on_damage(damage)

    # -- queries ----------------------------------------------------------------------

    def header(self) -> dict[str, Any]:
        """The header: ``thread_id`` and ``checkpoint_ns`` (the full ids), format, version.

        Raises:
            DamagedIndex: the header fails its checksum or is not a header.
        """
        header = _unline(self._header_raw)
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise DamagedIndex("the header is not a statekeeper checkpoints header")
        return header

    def newest(self, below: str | None = None, limit: int | None = None) -> list[Entry]:
        """Up to ``limit`` entries with ids below ``below`` (all if None), newest first."""
        end = self.valid_end if below is None else self._bisect(below)
        if end is None:  # a damaged line in the way, read leniently: filter every line
            assert below is not None
            return [e for e in self.newest() if e.checkpoint_id < below][:limit]
        found: list[Entry] = []
        while end > self.data_start and (limit is None or len(found) < limit):
            end, entry = self._entry_ending_at(end)
            if entry is not None:
                found.append(entry)
        return found

    def find(self, checkpoint_id: str) -> Entry | None:
        """The entry of ``checkpoint_id``, or None."""
        last = self.last
        # the common case (the newest, or an id past it) needs no bisection, unless a
        # damaged line follows the last intact one and the order after it is unknown
        tail_intact = self._last_end == self.valid_end
        if last is not None and tail_intact and last.checkpoint_id <= checkpoint_id:
            return last if last.checkpoint_id == checkpoint_id else None
        at = self._bisect(checkpoint_id)
        if at is None:
            return next((e for e in self.all() if e.checkpoint_id == checkpoint_id), None)
        if at >= self.valid_end:
            return None
        end = self._find_newline(at)
        assert end is not None
        entry = _entry(self._read(at, end))
        return entry if entry.checkpoint_id == checkpoint_id else None

    def all(self, *, strict: bool = False) -> list[Entry]:
        """Every entry, oldest first; ``strict`` raises on a damaged line even when
        reading leniently (for a rewrite, which must not drop it)."""
        saved = self.on_damage
        if strict:
            self.on_damage = None
        try:
            return self.newest()[::-1]
        finally:
            self.on_damage = saved

    def _bisect(self, target: str) -> int | None:
        """Offset of the first line whose id is >= ``target`` (``valid_end`` if none);
        None if a damaged line was met and skipped (only when reading leniently)."""
        lo, hi = self.data_start, self.valid_end  # lo is always the start of a line
        while lo < hi:
            mid = (lo + hi) // 2
            start = mid if self._read(mid - 1, mid) == b"\n" else self._after_newline(mid)
            if start >= hi:
                start = lo  # no line starts in [mid, hi): decide on the line at lo
            end = self._find_newline(start)
            assert end is not None
            try:
                entry = _entry(self._read(start, end))
            except DamagedIndex as damage:
                self._damaged(damage)
                return None
            if entry.checkpoint_id < target:
                lo = end + 1
            else:
                hi = start
        return lo

    def _after_newline(self, pos: int) -> int:
        at = self._find_newline(pos)
        return self.valid_end if at is None else at + 1

    # -- writing ----------------------------------------------------------------------

    def append(self, entry: Entry, *, durable: bool) -> None:
        """Append ``entry`` (its id must be the greatest), first cutting off a torn tail."""
        if self.size != self.valid_end:
            os.ftruncate(self._fd, self.valid_end)
        os.pwrite(self._fd, _line(entry.raw), self.valid_end)
        if durable:
            flush(self._fd)


def create(path: Path, thread_id: str, ns: str, *, durable: bool) -> None:
    """Write an empty file (header only) atomically; the caller syncs the directory."""
    replace_file(path, header_line(thread_id, ns), durable=durable)


def commit(view: IndexView, entry: Entry, thread_id: str, ns: str, *, durable: bool) -> None:
    """Record ``entry`` in the file ``view`` was opened (writable) on: an append in the
    common case (a new, greatest id), otherwise an atomic rewrite.

    Raises:
        DamagedIndex: a rewrite is needed and the file holds a damaged line (rewriting
            would drop it: nothing is removed silently).
    """
    if view.last is None or view.last.checkpoint_id < entry.checkpoint_id:
        view.append(entry, durable=durable)
        return
    existing = view.find(entry.checkpoint_id)
    if existing is not None and existing.raw == entry.raw:
        return
    entries = [e for e in view.all(strict=True) if e.checkpoint_id != entry.checkpoint_id]
    bisect.insort(entries, entry, key=lambda e: e.checkpoint_id)
    rewrite(view.path, thread_id, ns, entries, durable=durable)


def rewrite(
    path: Path, thread_id: str, ns: str, entries: Sequence[Entry], *, durable: bool
) -> None:
    """Replace the file with exactly ``entries`` (sorted by id), atomically."""
    ordered = sorted(entries, key=lambda e: e.checkpoint_id)
    data = b"".join([header_line(thread_id, ns), *(_line(e.raw) for e in ordered)])
    replace_file(path, data, durable=durable)
    if durable:
        sync_dir(path.parent)

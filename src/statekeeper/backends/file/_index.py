"""The file checkpointer's two logs per (thread, namespace): ``checkpoints`` and ``writes``.

Both are text files of the same shape: a header line, then lines sorted by checkpoint id.
Each line is the first 16 hex digits of the SHA-256 of its JSON, a space, and the JSON::

    9c0e...4d1a {"checkpoint_ns":"","format":"statekeeper-checkpoints","thread_id":"t-1",...}
    51f2...07bb {"checkpoint_id":"1f0c...","parent_checkpoint_id":"1f0b...","run_id":null,
                 "metadata":{...},"channel_versions":{...},"values":{...},"stored":[...],
                 "type":"msgpack","codec":"","checkpoint":"<the checkpoint, base64>"}

``checkpoints`` has one line per checkpoint (ids unique); ``writes`` one line per
``put_writes`` call (several per checkpoint id, in the order they were stored). What the
lines hold is described in ``docs/file-backend.md``.

A line exists exactly when it was appended whole and flushed, so the append is the
commit: a crash during it leaves a torn tail — bytes after the last newline — which
readers ignore and the next writer cuts off. A complete line that fails its checksum,
wherever it is, is damage: it raises :class:`DamagedIndex` (or is skipped, when reading
leniently) and is never cut off.

Reads never scan the file: the newest lines are read backwards from the end, and
``before`` / lookups by id bisect the sorted lines, so their cost does not grow with the
number of lines. Appending is the common write (ids grow); an id below the last one, a
replaced checkpoint or a deletion rewrites the file atomically.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from statekeeper._storage.files import flush, replace_file, sync_dir

__all__ = [
    "CHECKPOINTS",
    "WRITES",
    "DamagedIndex",
    "Entry",
    "IndexView",
    "appends",
    "commit",
    "create",
    "make_entry",
    "rewrite",
]

CHECKPOINTS = "checkpoints"  # the kinds of log, also their file names
WRITES = "writes"
_FORMATS = {CHECKPOINTS: "statekeeper-checkpoints", WRITES: "statekeeper-writes"}
VERSION = 2
_BLOCK = 8192  # bytes read at once; most lines are a few KiB
_ID_HEAD = 256  # bytes of a line's JSON read to find its id while bisecting
_SCAN = 2048  # bytes searched at once for the newline that ends or starts a line


class Entry(NamedTuple):
    """One line: its ids, the whole record, and the JSON as stored. A ``writes`` line has
    no parent or run id."""

    checkpoint_id: str
    parent_id: str | None
    run_id: str | None
    record: dict[str, Any]
    raw: bytes

    @property
    def deleted(self) -> bool:
        """Whether this is a deleted checkpoint's line, kept only for the values stored in
        it that remaining checkpoints use (no metadata, never listed or loaded)."""
        return self.record.get("deleted") is True


class DamagedIndex(Exception):
    """A line (or the header) fails its checksum or does not parse; ``str()`` says how,
    ``checkpoint_id`` whose line it was when that can still be read."""

    def __init__(self, reason: str, checkpoint_id: str | None = None) -> None:
        super().__init__(reason)
        self.checkpoint_id = checkpoint_id


def _dumps(value: Any) -> str:
    return json.dumps(
        value, ensure_ascii=True, sort_keys=True, allow_nan=False, separators=(",", ":")
    )


def _digest(raw: bytes) -> bytes:
    return hashlib.sha256(raw).hexdigest()[:16].encode("ascii")


def _line(raw: bytes) -> bytes:
    return _digest(raw) + b" " + raw + b"\n"


def header_line(kind: str, thread_id: str, ns: str) -> bytes:
    header = {"format": _FORMATS[kind], "version": VERSION}
    header.update(thread_id=thread_id, checkpoint_ns=ns)
    return _line(_dumps(header).encode("ascii"))


def make_entry(record: dict[str, Any]) -> Entry:
    """The entry for ``record`` (``checkpoint_id`` first, then ``parent_checkpoint_id``,
    ``run_id``, ``metadata`` and the rest), its JSON keys in that readable order.

    Raises:
        TypeError, ValueError: a value is not JSON.
    """
    raw = "{" + ",".join(f"{_dumps(key)}:{_dumps(value)}" for key, value in record.items()) + "}"
    return Entry(
        record["checkpoint_id"],
        record.get("parent_checkpoint_id"),
        record.get("run_id"),
        record,
        raw.encode("ascii"),
    )


def _unline(line: bytes) -> Any:
    """The JSON of one line (without its newline), after the checksum check."""
    raw = line[17:]
    if len(line) < 18 or line[16:17] != b" " or _digest(raw) != line[:16]:
        raise DamagedIndex(f"damaged line {_excerpt(raw)}: checksum mismatch", _id_in(raw))
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise DamagedIndex(f"damaged line {_excerpt(raw)}: {exc}", _id_in(raw)) from None


def _id_in(raw: bytes) -> str | None:
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


def _excerpt(raw: bytes) -> str:
    """A line's checkpoint id if it can still be read, else its first bytes."""
    found = _id_in(raw)
    return f"of checkpoint {found!r}" if found is not None else repr(bytes(raw[:40]))


# what each kind of line must hold besides its checkpoint id, and of which type
_FIELDS = {
    CHECKPOINTS: {"metadata": dict, "channel_versions": dict, "values": dict, "stored": list},
    WRITES: {"task_id": str, "task_path": str, "writes": list},
}


def _parser(kind: str) -> Callable[[bytes], Entry]:
    fields = _FIELDS[kind]

    def parse(line: bytes) -> Entry:
        record = _unline(line)
        try:
            ids = record["checkpoint_id"], record.get("parent_checkpoint_id"), record.get("run_id")
            if not all(i is None or isinstance(i, str) for i in ids) or ids[0] is None:
                raise TypeError("ids must be strings")
            wanted = {"stored": list} if record.get("deleted") is True else fields
            for key, type_ in wanted.items():
                if not isinstance(record[key], type_):
                    raise TypeError(f"{key} is not a {type_.__name__}")
        except (KeyError, TypeError, AttributeError) as exc:
            reason = f"damaged line {_excerpt(line[17:])}: not a {kind} line ({exc})"
            raise DamagedIndex(reason, _id_in(line[17:])) from None
        return Entry(*ids, record, line[17:])

    return parse


class IndexView:
    """One open log (``kind`` :data:`CHECKPOINTS` or :data:`WRITES`): a consistent
    snapshot while it is open.

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
        kind: str = CHECKPOINTS,
    ) -> None:
        self.path = path
        self.kind = kind
        self.on_damage = on_damage
        self._entry = _parser(kind)
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
            chunk = self._read(start, min(self.size, start + _SCAN))
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
            lo = max(self.data_start, pos - _SCAN)
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
            return start, self._entry(self._read(start, end - 1))
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
        if not isinstance(header, dict) or header.get("format") != _FORMATS[self.kind]:
            raise DamagedIndex(f"the header is not a statekeeper {self.kind} header")
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
        try:
            entry = self._entry(self._read(at, end))
        except DamagedIndex as damage:
            if damage.checkpoint_id in (None, checkpoint_id):
                self._damaged(damage)
            return None
        return entry if entry.checkpoint_id == checkpoint_id else None

    def lines_of(self, checkpoint_id: str) -> list[Entry]:
        """Every line of ``checkpoint_id``, in file order (for the ``writes`` log). When
        reading leniently, a damaged line that is, or may be, one of them raises anyway:
        leaving it out would change what the others mean."""
        last, tail_intact = self.last, self._last_end == self.valid_end
        if last is not None and tail_intact and last.checkpoint_id < checkpoint_id:
            return []  # the common case: a checkpoint newer than every line has none yet
        at = self._bisect(checkpoint_id)
        if at is None:  # a damaged line met, read leniently: look at every line
            saved = self.on_damage

            def check(damage: DamagedIndex) -> None:
                if damage.checkpoint_id in (None, checkpoint_id):
                    raise damage
                if saved is not None:
                    saved(damage)

            self.on_damage = check
            try:
                return [e for e in self.newest()[::-1] if e.checkpoint_id == checkpoint_id]
            finally:
                self.on_damage = saved
        found = []
        while at < self.valid_end:
            end = self._find_newline(at)
            assert end is not None
            try:
                entry = self._entry(self._read(at, end))
            except DamagedIndex as damage:
                if damage.checkpoint_id in (None, checkpoint_id):
                    raise
                break  # a later id's line: ours are all before it
            if entry.checkpoint_id != checkpoint_id:
                break
            found.append(entry)
            at = end + 1
        return found

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
        None if a damaged line whose id cannot be read was met and skipped (only when
        reading leniently)."""
        lo, hi = self.data_start, self.valid_end  # lo is always the start of a line
        while lo < hi:
            mid = (lo + hi) // 2
            start = mid if self._read(mid - 1, mid) == b"\n" else self._after_newline(mid)
            if start >= hi:
                start = lo  # no line starts in [mid, hi): decide on the line at lo
            end = self._find_newline(start)
            assert end is not None
            # Only the id at the head of a line is read to pass it: the line a caller
            # wants is checked whole when it is read, so a damaged line only matters to
            # a caller that wants that very line.
            line_id = _id_in(self._read(start + 17, min(end, start + 17 + _ID_HEAD)))
            if line_id is None:  # a long or unusual id, or damage: parse the whole line
                try:
                    line_id = self._entry(self._read(start, end)).checkpoint_id
                except DamagedIndex as damage:
                    if damage.checkpoint_id is None:
                        self._damaged(damage)
                        return None
                    line_id = damage.checkpoint_id
            if line_id < target:
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


def create(path: Path, kind: str, thread_id: str, ns: str, *, durable: bool) -> None:
    """Write an empty log (header only) atomically; the caller syncs the directory."""
    replace_file(path, header_line(kind, thread_id, ns), durable=durable)


def appends(view: IndexView, checkpoint_id: str) -> bool:
    """Whether a line for ``checkpoint_id`` goes at the end of the log (the common case):
    a new greatest id, or, in the ``writes`` log, the greatest id again."""
    last = view.last
    if last is None or last.checkpoint_id < checkpoint_id:
        return True
    return view.kind == WRITES and last.checkpoint_id == checkpoint_id


def commit(
    view: IndexView,
    entry: Entry,
    thread_id: str,
    ns: str,
    *,
    durable: bool,
    others: Callable[[list[Entry]], list[Entry]] | None = None,
) -> None:
    """Record ``entry`` in the log ``view`` was opened (writable) on: an append in the
    common case (see :func:`appends`), otherwise an atomic rewrite, which in the
    ``checkpoints`` log replaces the line of the same id (``others``, if given, adjusts
    the other lines first, given them all with the new one).

    Raises:
        DamagedIndex: a rewrite is needed and the file holds a damaged line (rewriting
            would drop it: nothing is removed silently).
    """
    if appends(view, entry.checkpoint_id):
        view.append(entry, durable=durable)
        return
    entries = view.all(strict=True)
    if view.kind == CHECKPOINTS:
        entries = [e for e in entries if e.checkpoint_id != entry.checkpoint_id]
    bisect.insort_right(entries, entry, key=lambda e: e.checkpoint_id)
    if others is not None:
        entries = others(entries)
    rewrite(view.path, view.kind, thread_id, ns, entries, durable=durable)


def rewrite(
    path: Path, kind: str, thread_id: str, ns: str, entries: Sequence[Entry], *, durable: bool
) -> None:
    """Replace the log with exactly ``entries`` (sorted by id, the order of equal ids
    kept), atomically."""
    ordered = sorted(entries, key=lambda e: e.checkpoint_id)
    data = b"".join([header_line(kind, thread_id, ns), *(_line(e.raw) for e in ordered)])
    replace_file(path, data, durable=durable)
    if durable:
        sync_dir(path.parent)

"""Reading a log: :class:`IndexView`, one open ``checkpoints`` or ``writes`` file checked
against its head.

A line exists exactly when it was appended whole, so the append is the commit: a crash
during it leaves a *torn tail* — bytes after the last newline, never acknowledged — which
readers ignore and the next writer cuts off. A complete line that fails its checksum,
wherever it is, is damage: it raises :class:`DamagedIndex` (or is skipped, when reading
leniently) and is never cut off. A log that lacks lines its head says were committed —
cut at a line boundary, a line deleted, an older copy put back, the head itself missing
or damaged — is damage too (:class:`Lost`), which is what tells a bad disk, copy or
restore from a crash before a commit.

Reads never scan the file: the newest lines are read backwards from the end, and
``before`` / lookups by id bisect the sorted lines, so their cost does not grow with the
number of lines. A lookup that finds no line checks the chain where the line would be,
so a line deleted from the middle is damage, not an absent checkpoint.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from statekeeper._storage.files import flush
from statekeeper.backends.file._log.blocks import LogBlocks
from statekeeper.backends.file._log.head import Head, head_path, kept, read_head, write_head
from statekeeper.backends.file._log.lines import (
    CHECKPOINTS,
    FORMATS,
    ID_HEAD,
    RECORDS,
    DamagedIndex,
    Entry,
    Lost,
    id_in,
    intact,
    json_start,
    line,
    parser,
    prev_of,
    unline,
)

__all__ = ["IndexView", "Lost"]  # Lost: see .lines

_ATTEMPTS = 2  # reads of a log that looks to lack committed lines (see IndexView)


class IndexView(LogBlocks):
    """One open log (``kind`` :data:`CHECKPOINTS` or :data:`WRITES`): a consistent
    snapshot while it is open.

    ``on_damage``, when given, is called with each damaged line, which is then skipped
    (lenient reading); without it, a damaged line raises :class:`DamagedIndex`.
    ``heads`` checks the log against its head (read before the log, as a writer writes
    it after); lines found lost are :attr:`lost`, reported like a damaged line at open,
    and a lookup they may hide raises even when reading leniently. ``writable`` opens it
    for :meth:`append` (the caller holds the thread's lock): a writer never writes over
    lost lines, so it raises for them whatever ``on_damage`` says.
    """

    def __init__(
        self,
        path: Path,
        on_damage: Callable[[DamagedIndex], None] | None = None,
        *,
        writable: bool = False,
        kind: str = CHECKPOINTS,
        heads: bool = False,
    ) -> None:
        self.path = path
        self.kind = kind
        self.on_damage = on_damage
        self._entry = parser(kind)
        # A reader racing a writer that replaces a folder whole (a copy into the thread)
        # may read a head and a log that never belonged together: what looks lost is
        # read again, at once, before it counts. A writer holds the lock: no race.
        attempts = _ATTEMPTS if heads and not writable else 1
        for attempt in range(attempts):
            self._open(writable=writable, heads=heads)
            if self.lost is None or attempt == attempts - 1:
                break
            self.close()
        if heads:
            try:
                self._report(writable)
            except BaseException:
                self.close()
                raise

    def _open(self, *, writable: bool, heads: bool) -> None:
        self.head: Head | None = None
        self.lost: Lost | None = None
        self.lines: int | None = None  # how many lines, when the head tells cheaply
        self._head_fd: int | None = None
        self._header_damage: DamagedIndex | None = None
        problem = self._open_head(writable) if heads else None
        try:
            self._fd = os.open(self.path, os.O_RDWR if writable else os.O_RDONLY)  # ENOENT
        except BaseException:
            self._close_head()
            raise
        try:
            super().__init__(self._fd)
            self.last: Entry | None = None  # the newest intact entry
            self._last_end = 0
            self.valid_end = self._valid_end()
            self.tail_digest = self._tail_digest()
            self.generation = 0
            if heads:
                self._check_head(problem)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> IndexView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._close_head()
        if self._fd != -1:
            os.close(self._fd)
            self._fd = -1

    def _close_head(self) -> None:
        if self._head_fd is not None:
            os.close(self._head_fd)
            self._head_fd = None

    # -- the head ---------------------------------------------------------------------

    def _open_head(self, writable: bool) -> DamagedIndex | None:
        """Read the head (before the log); what is wrong with it, if anything."""
        path = head_path(self.path)
        try:
            fd = os.open(path, os.O_RDWR if writable else os.O_RDONLY)
        except FileNotFoundError:
            return DamagedIndex(f"its head {path.name} is missing", record="head")
        except IsADirectoryError:  # opened to write (read_head says it when reading)
            return DamagedIndex(f"its head {path.name} is a directory", record="head")
        try:
            self.head = read_head(fd, path, self.kind)
        except DamagedIndex as problem:
            os.close(fd)
            return problem
        except BaseException:
            os.close(fd)
            raise
        if writable:
            self._head_fd = fd
        else:
            os.close(fd)
        return None

    def _check_head(self, problem: DamagedIndex | None) -> None:
        """Set :attr:`generation`, :attr:`lost` and a damaged header (whose generation is
        then taken to be the head's: if the log still ends where its head says, no line
        was lost, only the header is damaged)."""
        try:
            generation = self.header().get("generation", 0)
        except DamagedIndex as exc:
            self._header_damage, generation = exc, None
        if not isinstance(generation, int):
            malformed = DamagedIndex("malformed header", record="index")
            self._header_damage = self._header_damage or malformed
            generation = self.head.generation if self.head is not None else 0
        self.generation = generation
        if problem is not None:
            self.lost = Lost(problem)
        elif self.head is not None:
            self.lost = self._against(self.head)

    def _report(self, writable: bool) -> None:
        """Report lost lines and a damaged header (as damaged lines are reported)."""
        if self.lost is not None:
            if writable:
                raise self.lost.damage  # never written over: appending would hide the loss
            self._damaged(self.lost.damage)
        if self._header_damage is not None:
            self._damaged(self._header_damage)

    def _against(self, head: Head) -> Lost | None:
        """What the log lacks of what ``head`` says was committed (None: nothing); also
        checks the chain of the lines written after the head."""
        record = RECORDS[self.kind]
        if head.generation > self.generation:
            reason = (
                f"it is an older copy of the log (generation {self.generation}, its head "
                f"says {head.generation}): committed lines may be missing"
            )
            return Lost(DamagedIndex(reason, head.newest, record))
        if head.generation < self.generation:
            return None  # a rewrite whose head was not written yet (a crash, or racing it)
        if self.valid_end < head.end:
            reason = (
                f"it ends at byte {self.valid_end}, but its head says {head.end} bytes "
                f"({head.lines} lines, the last of checkpoint {head.newest!r}) were "
                "committed: committed lines are missing"
            )
            low = self.last.checkpoint_id if self.last is not None else None
            return Lost(DamagedIndex(reason, head.newest, record), low, head.newest)
        at_end = self.tail_digest if head.end == self.valid_end else self.digest_before(head.end)
        if at_end != head.last:
            reason = (
                f"its line ending at byte {head.end} is not the one its head says was "
                "committed last: lines were removed or changed"
            )
            return Lost(DamagedIndex(reason, head.newest, record))
        return self._chain_after(head)

    def _chain_after(self, head: Head) -> Lost | None:
        """Check that the lines after the head follow it (the head may lag the log by
        the lines a writer appended before it was killed, or before a power loss)."""
        at, prev, count = head.end, head.last, head.lines
        while at < self.valid_end:
            end = self.find_newline(at)
            assert end is not None
            data = self.read(at, end)
            try:
                entry = self._entry(data)
            except DamagedIndex as damage:
                self._damaged(damage)
                entry = None
            if entry is not None and entry.prev is not None and entry.prev != prev:
                reason = f"its line at byte {at} does not follow the committed lines before it"
                broken = DamagedIndex(reason, entry.checkpoint_id, RECORDS[self.kind])
                return Lost(broken, head.newest, None)
            prev, at, count = data[:16], end + 1, count + 1
        self.lines = count
        return None

    def digest_before(self, end: int) -> bytes | None:
        """The checksum of the line ending (newline included) at ``end``: the header's
        for the start of the lines; None if no line ends there."""
        if end == self.data_start:
            return self._header_raw[:16]
        if end < self.data_start or end > self.size or self.read(end - 1, end) != b"\n":
            return None
        start = self.line_start_before(end)
        return self.read(start, start + 16)

    def chained_at(self, at: int) -> bool:
        """Whether the line starting at ``at`` (a line start) names the line before it
        (True for a format 2 line, which names none, and at the end)."""
        if at >= self.valid_end:
            return True
        prev = prev_of(self.read(at, min(self.valid_end, at + 40)))
        return prev is None or prev == self.digest_before(at)

    def _missing_here(self, at: int, checkpoint_id: str) -> None:
        """Raise if a line is missing where ``checkpoint_id``'s line would be."""
        if not self.chained_at(at):
            reason = (
                f"a committed line is missing where checkpoint {checkpoint_id!r}'s would "
                "be (the line after it does not name the line before it)"
            )
            raise DamagedIndex(reason, checkpoint_id, RECORDS[self.kind])
        if self.lost is not None and self.lost.covers(checkpoint_id):
            raise self.lost.damage

    # -- low-level reading ------------------------------------------------------------

    def _valid_end(self) -> int:
        """End of the last complete line. Bytes after the last newline are a torn tail
        (what a crash during an append leaves: the line was never acknowledged) and not
        part of the content. Also finds :attr:`last`, the newest intact entry."""
        end = self.size
        if end > self.data_start and self.read(end - 1, end) != b"\n":
            end = self.line_start_before(end)
        at = end
        while at > self.data_start and self.last is None:
            self._last_end = at
            at, self.last = self._entry_ending_at(at)
        return end

    def _tail_digest(self) -> bytes:
        """The checksum of the last complete line (the header's if there is none)."""
        last = self.last
        if last is not None and self._last_end == self.valid_end:
            return last.digest  # the last line is intact: read already
        tail = self.digest_before(self.valid_end)
        assert tail is not None  # valid_end always ends a line (or the header)
        return tail

    def _entry_ending_at(self, end: int) -> tuple[int, Entry | None]:
        start = self.line_start_before(end)
        try:
            return start, self._entry(self.read(start, end - 1))
        except DamagedIndex as damage:
            self._damaged(damage)
            return start, None

    def _damaged(self, damage: DamagedIndex) -> None:
        if self.on_damage is None:
            raise damage
        self.on_damage(damage)

    # -- queries ----------------------------------------------------------------------

    def header(self) -> dict[str, Any]:
        """The header: ``thread_id`` and ``checkpoint_ns`` (the full ids), format, version
        and (format 3) ``generation``.

        Raises:
            DamagedIndex: the header fails its checksum or is not a header.
        """
        header = _header(self._header_raw, self.kind)
        if isinstance(header, DamagedIndex):
            raise DamagedIndex(str(header), header.checkpoint_id, "index")
        return dict(header)

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
        """The entry of ``checkpoint_id``, or None.

        Raises:
            DamagedIndex: its line is, or may be, damaged (a damaged line where it would
                be: the id a damaged line shows cannot be trusted) or lost, even when
                reading leniently.
        """
        last = self.last
        # the common case (the newest, or an id past it) needs no bisection, unless a
        # damaged line follows the last intact one and the order after it is unknown
        tail_intact = self._last_end == self.valid_end
        if last is not None and tail_intact and last.checkpoint_id <= checkpoint_id:
            if last.checkpoint_id == checkpoint_id:
                return last
            self._missing_here(self.valid_end, checkpoint_id)
            return None
        at = self._bisect(checkpoint_id)
        if at is None:  # a damaged line met, read leniently: look at every line
            return next(iter(self._scan_for(checkpoint_id)), None)
        if at < self.valid_end:
            end = self.find_newline(at)
            assert end is not None
            try:
                entry = self._entry(self.read(at, end))
            except DamagedIndex:
                entry = None
            if entry is not None and entry.checkpoint_id == checkpoint_id:
                return entry
        self._suspect(at, checkpoint_id, after=True)
        self._missing_here(at, checkpoint_id)
        return None

    def lines_of(self, checkpoint_id: str) -> list[Entry]:
        """Every line of ``checkpoint_id``, in file order (for the ``writes`` log). A
        damaged line among or beside them, which may be one of them, raises even when
        reading leniently: leaving it out would change what the others mean; so do
        lines that may be lost."""
        if self.lost is not None and self.lost.covers(checkpoint_id):
            raise self.lost.damage
        last, tail_intact = self.last, self._last_end == self.valid_end
        if last is not None and tail_intact and last.checkpoint_id < checkpoint_id:
            return []  # the common case: a checkpoint newer than every line has none yet
        at = self._bisect(checkpoint_id)
        if at is None:  # a damaged line met, read leniently: look at every line
            return self._scan_for(checkpoint_id)
        self._suspect(at, checkpoint_id, after=False)
        self._missing_here(at, checkpoint_id)  # none of its lines, or its first, deleted
        found: list[Entry] = []
        while at < self.valid_end:
            end = self.find_newline(at)
            assert end is not None
            entry = self._entry(self.read(at, end))  # damaged: may be ours, raises
            if entry.checkpoint_id != checkpoint_id:
                break
            if found and entry.prev is not None and entry.prev != found[-1].digest:
                self._missing_here(at, checkpoint_id)  # one of its lines deleted: raises
            found.append(entry)
            at = end + 1
        self._missing_here(at, checkpoint_id)  # its last line deleted
        return found

    def _suspect(self, at: int, checkpoint_id: str, *, after: bool) -> None:
        """Raise if a line next to ``at`` (where ``checkpoint_id``'s lines are, or would
        be) is damaged: the lines are sorted, so a damaged line of that checkpoint, whatever
        id it now shows, is next to where a bisection for it ends. ``after``: also the
        line at ``at`` (a ``find``; ``lines_of`` reads it anyway)."""
        starts = [self.line_start_before(at)] if at > self.data_start else []
        if after and at < self.valid_end:
            starts.append(at)
        for start in starts:
            end = self.find_newline(start)
            assert end is not None
            data = self.read(start, end)
            if not intact(data):
                self._entry(data)  # raises, saying what is wrong
                raise DamagedIndex(f"a damaged line next to checkpoint {checkpoint_id!r}'s")

    def _scan_for(self, checkpoint_id: str) -> list[Entry]:
        """The lines of ``checkpoint_id``, found by reading every line (a bisection met a
        damaged line whose id cannot be read); raises if any line is damaged, since it
        may be one of them."""
        saved = self.on_damage
        self.on_damage = None
        try:
            found = [e for e in self.newest()[::-1] if e.checkpoint_id == checkpoint_id]
        finally:
            self.on_damage = saved
        if not found and self.lost is not None and self.lost.covers(checkpoint_id):
            raise self.lost.damage
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
            start = mid if self.read(mid - 1, mid) == b"\n" else self.after_newline(mid)
            if start >= hi:
                start = lo  # no line starts in [mid, hi): decide on the line at lo
            end = self.find_newline(start)
            assert end is not None
            # Only the id at the head of a line is read to pass it: the line a caller
            # wants is checked whole when it is read, so a damaged line only matters to
            # a caller that wants that very line.
            head = self.read(start, min(end, start + ID_HEAD))
            line_id = id_in(head[json_start(head) :])
            if line_id is None:  # a long or unusual id, or damage: parse the whole line
                try:
                    line_id = self._entry(self.read(start, end)).checkpoint_id
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

    # -- writing ----------------------------------------------------------------------

    def append(self, entry: Entry, *, durable: bool) -> None:
        """Append ``entry`` (its id must be the greatest), first cutting off a torn tail;
        then, once the line is durable, move the head (if the view has one) past it."""
        if self.size != self.valid_end:
            os.ftruncate(self._fd, self.valid_end)
        data = line(entry.raw, self.tail_digest)
        os.pwrite(self._fd, data, self.valid_end)
        if durable:
            flush(self._fd)
        end = self.valid_end + len(data)
        if self._head_fd is not None and self.head is not None:
            lines = self.lines if self.lines is not None else self.count()
            newest = kept(entry.checkpoint_id)
            head = Head(
                self.head.seq + 1, self.generation, end, data[:16], lines + 1, newest, self.kind
            )
            write_head(self._head_fd, head)
            self.head, self.lines = head, lines + 1
        self.size = self.valid_end = end
        self.tail_digest = data[:16]
        self._cache = (0, b"")


@functools.lru_cache(maxsize=256)  # a log's header is read at every open, and rarely changes
def _header(raw: bytes, kind: str) -> Mapping[str, Any] | DamagedIndex:
    """The header line ``raw`` of a ``kind`` log, checked; or what is wrong with it."""
    try:
        header = unline(raw)[2]
    except DamagedIndex as damage:
        return damage
    if not isinstance(header, dict) or header.get("format") != FORMATS[kind]:
        return DamagedIndex(f"the header is not a statekeeper {kind} header")
    return MappingProxyType(header)

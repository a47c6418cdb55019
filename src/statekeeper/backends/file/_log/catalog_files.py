"""The files of the directory's index (``index/``), the *catalog* of its threads and
checkpoints: what each holds, and how it is written and read (the journal is read, and
the files merged into one view, by :mod:`.catalog_view`; locking and the order of writes
are :mod:`.catalog`'s and :mod:`.catalog_write`'s).

::

    index/state                 which files below are current: a checksummed record
                                (:func:`~statekeeper._storage.files.pack_record`), replaced
                                whole by a rename
    index/journal-<n>           the live journal: one line per change, chained like a log's
    index/journal-<n>.head      lines (:mod:`.lines`), with a head (:mod:`.head`)
    index/heads-<k>             sorted: one line per thread that has a root checkpoint,
                                ``[newest checkpoint id, thread id]``
    index/checkpoints-<k>       sorted: one line per checkpoint, ``[checkpoint id, thread
                                id, namespace]``

The two sorted files (the *base*) are written once, through a temporary file and a rename,
and never changed: ``<kind>-<k>`` holds what the journals before ``journal-<k>`` said. The
state records each one's size, line count and SHA-256, so a sorted file cut, grown or
swapped is damage. Every line of every file carries the checksum of its JSON.

The journal is appended to under a lock (one writer at a time, so each line can name the
one before it), and its head moves after each append, unflushed, exactly as a log's does:
a journal shorter than its head, or whose lines do not chain, lost committed lines, which
is damage; complete, chained lines past the head count (a writer killed before it moved
the head); bytes after the last newline are a line being written, or one whose writer was
killed, and are ignored (the next writer cuts them off).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statekeeper._storage.files import (
    RecordError,
    flush,
    pack_record,
    read_bytes,
    replace_file,
    sync_dir,
    unpack_record,
)
from statekeeper.backends.file._log.blocks import LogBlocks
from statekeeper.backends.file._log.head import (
    SLOT,
    Head,
    head_path,
    initial_head,
    read_head,
    slot_bytes,
    write_head,
)
from statekeeper.backends.file._log.lines import DamagedIndex, dumps, intact, line, prev_of, unline

__all__ = [
    "FOLDER",
    "JOURNAL",
    "KINDS",
    "CatalogDamage",
    "JournalWriter",
    "State",
    "base_path",
    "check_header",
    "create_journal",
    "current_boot",
    "journal_path",
    "read_sorted",
    "read_state",
    "sorted_desc",
    "sorted_line",
    "write_sorted",
    "write_state",
]

FOLDER = "index"
STATE = "state"
JOURNAL = "index-journal"  # the kind of the journal's head
KINDS = {"heads": 2, "checkpoints": 3}  # the sorted files, and how many ids a line holds
_FORMAT = "statekeeper-index"
_VERSION = 1
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")

Key = tuple[str, ...]


class CatalogDamage(Exception):
    """A file of the index is not what was written; ``str()`` says which and how."""

    def __init__(self, reason: str, path: Path) -> None:
        super().__init__(f"{path}: {reason}")
        self.reason = reason
        self.path = path


def current_boot() -> str:
    """This machine's boot id (Linux), or ``""`` where there is none.

    Lines of the journal are not flushed to disk one by one: a power loss may lose the
    last ones while the checkpoints they announce survive. Only a restart of the machine
    can lose them, so an index written under another boot id is rebuilt before it is
    trusted; without a boot id, writers flush the lines that must survive instead.
    """
    try:
        return read_bytes(_BOOT_ID).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return ""


def journal_path(folder: Path, generation: int) -> Path:
    return folder / f"journal-{generation}"


def base_path(folder: Path, kind: str, generation: int) -> Path:
    return folder / f"{kind}-{generation}"


def _header(kind: str, generation: int) -> bytes:
    raw = dumps({"format": _FORMAT, "generation": generation, "kind": kind, "version": _VERSION})
    return line(raw.encode("ascii"), None)


def check_header(data: bytes, kind: str, generation: int, path: Path) -> bytes:
    """The checksum of ``data``, a header line (without its newline), once checked."""
    try:
        checksum, _, header = unline(data)
    except DamagedIndex as damage:
        raise CatalogDamage(f"its header is damaged ({damage})", path) from None
    expected = {"format": _FORMAT, "generation": generation, "kind": kind}
    if not isinstance(header, dict) or any(header.get(k) != v for k, v in expected.items()):
        raise CatalogDamage(f"its header is not the one of {kind} {generation}", path)
    return checksum


# -- the state ------------------------------------------------------------------------------


@dataclass(frozen=True)
class State:
    """What ``index/state`` says: the live journal, the journal a compaction froze (read
    between the base and the live one), the base (``None`` while the index is being built),
    each sorted file's ``(size, lines, sha256)``, the boot id under which unflushed lines
    were written, and why the index is damaged if a writer found it so."""

    journal: int
    frozen: int | None = None
    base: int | None = None
    files: Mapping[str, tuple[int, int, str]] = field(default_factory=dict)
    boot: str = ""
    damaged: str | None = None

    def journals(self) -> list[int]:
        """The journals to read over the base, oldest first."""
        return [self.journal] if self.frozen is None else [self.frozen, self.journal]


def read_state(folder: Path) -> State | None:
    """The state of the index in ``folder``; None if there is none. (Read again only when
    the file changed: it is replaced whole, by a rename, so a ``stat`` tells.)

    Raises:
        CatalogDamage: it is damaged or malformed.
    """
    path = folder / STATE
    try:
        found = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    stamp = (str(path), found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns)
    if (cached := _STATES.get(stamp)) is not None:
        return cached
    try:
        data = read_bytes(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    state = _parse_state(data, path)
    if len(_STATES) >= 16:
        _STATES.clear()
    _STATES[stamp] = state
    return state


_STATES: dict[tuple[str, int, int, int, int], State] = {}  # states read, by file stamp


def _parse_state(data: bytes, path: Path) -> State:
    try:
        meta, _ = unpack_record(data)
        if meta.get("kind") != "index" or meta.get("version") != _VERSION:
            raise RecordError("not the state of an index")
        files = {
            kind: (int(size), int(lines), str(sha))
            for kind, (size, lines, sha) in meta["files"].items()
            if kind in KINDS
        }
        state = State(
            meta["journal"], meta["frozen"], meta["base"], files, meta["boot"], meta["damaged"]
        )
        generations = (state.journal, state.frozen, state.base)
        if (
            not all(g is None or type(g) is int for g in generations)
            or type(state.journal) is not int
        ):
            raise RecordError("a generation is not an integer")
        if not isinstance(state.boot, str) or not isinstance(state.damaged, str | None):
            raise RecordError("malformed boot id or damage")
        if state.base is not None and set(files) != set(KINDS):
            raise RecordError("its sorted files are not listed")
    except (RecordError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CatalogDamage(f"the state of the index is damaged ({exc})", path) from None
    return state


def write_state(folder: Path, state: State, *, durable: bool) -> None:
    """Replace the state (atomically; durably when ``durable``)."""
    meta = {
        "kind": "index",
        "version": _VERSION,
        "journal": state.journal,
        "frozen": state.frozen,
        "base": state.base,
        "files": {kind: list(found) for kind, found in state.files.items()},
        "boot": state.boot,
        "damaged": state.damaged,
    }
    replace_file(folder / STATE, pack_record(meta), durable=durable)
    if durable:
        sync_dir(folder)


# -- the journal -----------------------------------------------------------------------------


def create_journal(path: Path, generation: int, *, durable: bool) -> None:
    """An empty journal and its head (the head first); the caller syncs the folder."""
    header = _header("journal", generation)
    head = Head(0, generation, len(header), header[:16], 0, None, JOURNAL)
    initial_head(head_path(path), head, durable=durable)
    replace_file(path, header, durable=durable)


def _record_line(record: Mapping[str, Any], prev: bytes) -> bytes:
    return line(dumps(record).encode("ascii"), prev)


_WRITTEN: dict[bytes, Head] = {}  # a journal head's bytes as last written here -> that head


class JournalWriter:
    """A journal open for appending; the caller holds the append lock for each
    :meth:`append` (so appends never interleave, and each line names the one before)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR)  # FileNotFoundError: no such journal
        try:
            self._head_fd = os.open(head_path(path), os.O_RDWR)
        except BaseException:
            os.close(self._fd)
            raise

    def close(self) -> None:
        os.close(self._head_fd)
        os.close(self._fd)

    def append(self, records: Sequence[Mapping[str, Any]], *, durable: bool) -> int:
        """Append one line per record, after the committed lines (cutting off a torn
        tail), flushed when ``durable``; then move the head past them. Returns the size
        of the journal after them.

        Raises:
            CatalogDamage: the journal or its head is damaged (nothing is written).
            OSError: the write failed.
        """
        slots = os.pread(self._head_fd, 2 * SLOT, 0)
        head = _WRITTEN.get(slots)  # the head this process wrote last, unchanged since
        if head is None:
            try:
                head = read_head(self._head_fd, head_path(self.path), JOURNAL)
            except DamagedIndex as damage:
                raise CatalogDamage(str(damage), self.path) from None
        size = os.fstat(self._fd).st_size
        if size < head.end:
            raise CatalogDamage(f"it ends at byte {size}, before its head ({head.end})", self.path)
        at, prev, count = head.end, head.last, head.lines
        past = os.pread(self._fd, size - at, at) if size > at else b""
        for raw in past.split(b"\n")[:-1]:  # complete lines a killed writer left
            if not intact(raw) or prev_of(raw) != prev:
                raise CatalogDamage(f"its line at byte {at} does not follow its head", self.path)
            at, prev, count = at + len(raw) + 1, raw[:16], count + 1
        parts = []
        for record in records:
            parts.append(_record_line(record, prev))
            prev = parts[-1][:16]
        data = b"".join(parts)
        if size != at:
            os.ftruncate(self._fd, at)  # a torn tail: never acknowledged
        view = memoryview(data)
        offset = at
        while view:
            written = os.pwrite(self._fd, view, offset)
            view, offset = view[written:], offset + written
        if durable:
            flush(self._fd)
        end = at + len(data)
        new = Head(head.seq + 1, head.generation, end, prev, count + len(parts), None, JOURNAL)
        write_head(self._head_fd, new)
        if len(slots) == 2 * SLOT:  # the head file as it is now: the next append reuses it
            at_slot = (new.seq % 2) * SLOT
            if len(_WRITTEN) >= 64:
                _WRITTEN.clear()
            _WRITTEN[slots[:at_slot] + slot_bytes(new) + slots[at_slot + SLOT :]] = new
        return end


# -- the sorted files ------------------------------------------------------------------------


def sorted_line(key: Sequence[str]) -> bytes:
    """The line of a sorted file holding ``key`` (its newline included)."""
    return line(dumps(list(key)).encode("ascii"), None)


def write_sorted(
    path: Path, kind: str, generation: int, lines: Iterable[bytes], *, durable: bool
) -> tuple[int, int, str]:
    """Write the sorted file ``kind`` of ``generation`` holding ``lines`` (from
    :func:`sorted_line`, in order); return its ``(size, lines, sha256)``. The caller syncs
    the folder."""
    parts = [_header(kind, generation), *lines]
    data = b"".join(parts)
    replace_file(path, data, durable=durable)
    return len(data), len(parts) - 1, hashlib.sha256(data).hexdigest()


def _plain(raw: bytes) -> Any:
    """The JSON of a line without a chained checksum, once checked; None if damaged."""
    if not intact(raw):
        return None
    try:
        return json.loads(raw[17:])
    except ValueError:
        return None


class _Sorted(LogBlocks):
    """A sorted file open for reading, checked against what the state says of it."""

    def __init__(self, path: Path, kind: str, generation: int, expected: tuple[int, int, str]):
        self.path = path
        self.width = KINDS[kind]
        try:
            fd = os.open(path, os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError):
            raise CatalogDamage("the file is missing", path) from None
        try:
            super().__init__(fd)
            if self.size != expected[0]:
                reason = f"it holds {self.size} bytes where {expected[0]} were written"
                raise CatalogDamage(reason, path)
            check_header(self._header_raw, kind, generation, path)
        except DamagedIndex:
            os.close(fd)
            raise CatalogDamage("its header line is missing", path) from None
        except BaseException:
            os.close(fd)
            raise

    def close(self) -> None:
        os.close(self._fd)

    def key(self, start: int, end: int) -> Key:
        """The ids of the line from ``start`` to its newline at ``end``, checked."""
        found = _plain(self.read(start, end))
        if found is None:
            raise CatalogDamage(f"a damaged line at byte {start}", self.path)
        if not isinstance(found, list) or len(found) != self.width:
            raise CatalogDamage(f"a malformed line at byte {start}", self.path)
        if not all(isinstance(part, str) for part in found):
            raise CatalogDamage(f"a malformed line at byte {start}", self.path)
        return tuple(found)

    def bisect(self, target: Key) -> int:
        """Offset of the first line whose key is ``>= target`` (the end if none)."""
        lo, hi = self.data_start, self.valid_end
        while lo < hi:
            mid = (lo + hi) // 2
            start = mid if self.read(mid - 1, mid) == b"\n" else self.after_newline(mid)
            if start >= hi:
                start = lo
            end = self.find_newline(start)
            if end is None:
                raise CatalogDamage("its last line is torn", self.path)
            if self.key(start, end) < target:
                lo = end + 1
            else:
                hi = start
        return lo


def sorted_desc(
    folder: Path, kind: str, state: State, bound: Key | None, page: int = 16
) -> Iterator[Key]:
    """The keys of the sorted file ``kind`` of ``state``'s base below ``bound`` (all if
    None), greatest first: read in pages from where a bisection puts ``bound``, the file
    reopened for each page (so no descriptor is held between them), each page four times
    the last.

    Raises:
        CatalogDamage: the file is missing, of another size than written, or damaged.
    """
    assert state.base is not None
    path = base_path(folder, kind, state.base)
    while True:
        found: list[Key] = []
        blocks = _Sorted(path, kind, state.base, state.files[kind])
        try:
            end = blocks.valid_end if bound is None else blocks.bisect(bound)
            while end > blocks.data_start and len(found) < page:
                start = blocks.line_start_before(end)
                found.append(blocks.key(start, end - 1))
                end = start
        finally:
            blocks.close()
        yield from found
        if len(found) < page:
            return
        bound, page = found[-1], min(page * 4, 1024)


def read_sorted(folder: Path, kind: str, state: State) -> list[tuple[Key, bytes]]:
    """Every key of the sorted file ``kind`` of ``state``'s base, in order, with its line
    (kept as it is by a compaction), the file checked whole: its SHA-256 (so its lines
    need no check of their own), then its order.

    Raises:
        CatalogDamage: it is missing or damaged.
    """
    assert state.base is not None
    path = base_path(folder, kind, state.base)
    size, lines, sha = state.files[kind]
    try:
        data = read_bytes(path)
    except (FileNotFoundError, NotADirectoryError):
        raise CatalogDamage("the file is missing", path) from None
    except IsADirectoryError:
        raise CatalogDamage("it is a directory, not a file", path) from None
    if len(data) != size or hashlib.sha256(data).hexdigest() != sha:
        raise CatalogDamage("its content is not what was written (size or SHA-256)", path)
    rows = data.split(b"\n")[:-1]
    check_header(rows[0], kind, state.base, path)
    rows = rows[1:]
    if len(rows) != lines:
        raise CatalogDamage(f"it holds {len(rows)} lines where {lines} were written", path)
    parsed = json.loads(b"[" + b",".join(raw[17:] for raw in rows) + b"]")  # one call: fast
    keys = [tuple(found) for found in parsed]
    if any(a >= b for a, b in itertools.pairwise(keys)):
        raise CatalogDamage("its lines are out of order", path)
    return [(key, raw + b"\n") for key, raw in zip(keys, rows, strict=True)]

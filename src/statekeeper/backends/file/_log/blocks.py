"""The bytes of an open log, read in cached blocks, and where its lines start and end."""

from __future__ import annotations

import os
import stat

from statekeeper.backends.file._log.lines import DamagedIndex

__all__ = ["LogBlocks"]

_BLOCK = 8192  # bytes read at once; most lines are a few KiB
_SCAN = 2048  # bytes searched at once for the newline that ends or starts a line


class LogBlocks:
    """The log open on ``fd``: its size when opened, its header line, and the offsets of
    its lines, read in blocks (one cached) around what is asked for.

    Raises:
        DamagedIndex: the log has no complete header line, or is not a regular file (a
            directory in its place; record ``"index"``).
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._cache = (0, b"")  # (offset, bytes): the last block read
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            # opening a directory for reading succeeds; reading it fails with an EISDIR
            # that names no path: say what is wrong, as for any other damaged log
            kind = "a directory" if stat.S_ISDIR(found.st_mode) else "not a regular file"
            raise DamagedIndex(f"it is {kind}, not a log file", record="index")
        self.size = found.st_size
        header_end = self.find_newline(0)
        if header_end is None:
            raise DamagedIndex("the header line is missing or torn", record="index")
        self._header_raw = self.read(0, header_end)
        self.data_start = header_end + 1
        self.valid_end = self.size  # where the complete lines end (a subclass finds it)

    def read(self, start: int, end: int) -> bytes:
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

    def find_newline(self, start: int) -> int | None:
        """Offset of the first newline at or after ``start``, or None before the end."""
        while start < self.size:
            chunk = self.read(start, min(self.size, start + _SCAN))
            at = chunk.find(b"\n")
            if at != -1:
                return start + at
            start += len(chunk)
        return None

    def line_start_before(self, end: int) -> int:
        """Start of the line whose newline is at ``end - 1`` (or of the bytes before
        ``end`` when ``end - 1`` is not a newline: a torn tail)."""
        pos = end - 1
        while pos > self.data_start:
            lo = max(self.data_start, pos - _SCAN)
            at = self.read(lo, pos).rfind(b"\n")
            if at != -1:
                return lo + at + 1
            pos = lo
        return self.data_start

    def after_newline(self, pos: int) -> int:
        """Start of the first line after ``pos`` (``valid_end`` if none)."""
        at = self.find_newline(pos)
        return self.valid_end if at is None else at + 1

    def count(self) -> int:
        """How many complete lines the log has (reads it whole)."""
        return os.pread(self._fd, self.valid_end - self.data_start, self.data_start).count(b"\n")

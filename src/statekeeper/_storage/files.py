"""Crash-safe files, shared by every statekeeper component that stores plain files.

* :func:`replace_file` writes a temporary file in the target's directory, flushes it to
  disk and renames it over the target, so a reader (or a process killed at any instant)
  sees the old file or the new one, never a mix; :func:`sync_dir` then makes the rename
  itself durable.
* :func:`pack_record` / :func:`unpack_record`: a *record* is a header line carrying the
  SHA-256 and length of its body, a JSON line, and binary blobs. A truncated or altered
  record fails :func:`unpack_record` with :class:`RecordError` saying why.
* :class:`KeyLocks`: exclusive locks by name, between the threads of this process and
  between processes (``fcntl.flock`` on one lock file per name, so POSIX only). The
  kernel releases a dead process's locks, so a crash never leaves a lock held; a forked
  child closes the lock descriptors it inherited from the parent's other threads.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
import weakref
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from statekeeper.errors import StorageError

__all__ = [
    "TEMP_PREFIX",
    "KeyLocks",
    "RecordError",
    "flush",
    "pack_record",
    "read_bytes",
    "replace_file",
    "storage_error",
    "sync_dir",
    "unpack_record",
]

TEMP_PREFIX = ".tmp-"  # temporary files: never a valid stored name (those never start with ".")
_MAGIC = b"statekeeper-record"
_VERSION = 1


class RecordError(Exception):
    """Stored bytes are not an intact record; ``str()`` says why."""


def storage_error(exc: OSError, action: str, path: Path | str) -> StorageError:
    """A :class:`StorageError` for an OS error, naming the path and what to check."""
    reason = exc.strerror or str(exc)
    hint = "check that the directory exists, is writable and the disk is not full"
    return StorageError(f"cannot {action} {str(path)!r}: {reason}; {hint}")


# -- atomic writes ---------------------------------------------------------------------


def replace_file(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Atomically make ``path`` hold ``data``: temporary file in the same directory,
    written, flushed to disk (unless not ``durable``), then renamed over ``path``. Call
    :func:`sync_dir` on the directory afterwards for the rename to survive a power loss.
    Readers, and a process killed at any instant, see the old content or the new.

    Raises:
        OSError: the write failed; ``path`` is unchanged and the temporary file removed.
    """
    temp = path.with_name(f"{TEMP_PREFIX}{os.getpid()}-{os.urandom(6).hex()}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                flush(fd)
        finally:
            os.close(fd)
        temp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise


def sync_dir(path: Path) -> None:
    """Flush a directory's entries (creations, renames, removals) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def flush(fd: int) -> None:
    """Flush a file's content (and size) to disk."""
    # fdatasync skips the timestamps, which nothing here relies on; macOS lacks it.
    (getattr(os, "fdatasync", None) or os.fsync)(fd)


def read_bytes(path: Path) -> bytes:
    """The whole content of ``path`` (``FileNotFoundError`` if it does not exist)."""
    with open(path, "rb") as file:  # noqa: PTH123 - a plain read, no Path overhead
        return file.read()


# -- checksummed records ---------------------------------------------------------------


def pack_record(meta: dict[str, Any], blobs: Sequence[bytes] = ()) -> bytes:
    """A record: ``statekeeper-record 1 <sha256> <length>\\n``, then the body — ``meta``
    as one line of JSON (with the blob sizes under ``"sizes"``) and the blobs."""
    head = json.dumps(
        {**meta, "sizes": [len(blob) for blob in blobs]},
        ensure_ascii=True,
        sort_keys=True,
        allow_nan=False,
        separators=(",", ":"),
    ).encode("ascii")
    body = b"".join([head, b"\n", *blobs])
    digest = hashlib.sha256(body).hexdigest().encode("ascii")
    return b"%s %d %s %d\n%s" % (_MAGIC, _VERSION, digest, len(body), body)


def unpack_record(data: bytes) -> tuple[dict[str, Any], list[bytes]]:
    """Inverse of :func:`pack_record`, after checking length and checksum.

    Raises:
        RecordError: the bytes are empty, truncated, altered or not a record.
    """
    end = data.find(b"\n", 0, 200)
    fields = data[:end].split(b" ") if end != -1 else []
    if len(fields) != 4 or fields[0] != _MAGIC:
        what = "empty" if not data else "not a statekeeper record (bad header)"
        raise RecordError(what)
    if not fields[1].isdigit() or int(fields[1]) > _VERSION:
        raise RecordError(f"record format {fields[1]!r} is newer than this statekeeper")
    body = memoryview(data)[end + 1 :]
    if not fields[3].isdigit() or len(body) != int(fields[3]):
        raise RecordError(f"truncated: the header says {fields[3]!r} bytes, found {len(body)}")
    if hashlib.sha256(body).hexdigest().encode("ascii") != fields[2]:
        raise RecordError("checksum mismatch: the content was altered after it was written")
    split = data.find(b"\n", end + 1)
    try:
        meta = json.loads(data[end + 1 : split])
        sizes = meta.pop("sizes")
        blobs, at = [], split + 1
        for size in sizes:
            blobs.append(data[at : at + size])
            at += size
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise RecordError(f"unreadable record body: {exc}") from None
    if at != len(data):
        raise RecordError("the blob sizes do not add up to the record length")
    return meta, blobs


# -- locks -----------------------------------------------------------------------------

_STRIPES = 64
# The descriptors of held flocks (fd -> the thread holding it), and every KeyLocks: a
# forked child must not keep the parent's other threads' locks alive (a flock lasts as
# long as any process has the descriptor open), nor inherit their in-process locks taken.
_held_fds: dict[int, int] = {}
_instances: weakref.WeakSet[KeyLocks] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    forking = threading.get_ident()  # the only thread the child has
    for fd, holder in list(_held_fds.items()):
        if holder != forking:
            del _held_fds[fd]
            with contextlib.suppress(OSError):
                os.close(fd)
    for locks in list(_instances):
        locks.reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class KeyLocks:
    """Exclusive locks by name (a file name) under one directory.

    Within a process, waiters queue on a lock striped by name (no polling); across
    processes, ``fcntl.flock`` on ``directory/<name>``. Several names are always taken
    in sorted order, so two callers can never deadlock on each other.
    """

    def __init__(self, directory: Path, timeout: float) -> None:
        try:
            import fcntl  # noqa: F401 - POSIX only: fail at open, not at the first write
        except ImportError:
            raise StorageError(
                "the file checkpointer needs POSIX file locks (fcntl.flock), which this "
                "platform lacks; use sqlite:/// instead"
            ) from None
        self.directory = directory
        self.timeout = timeout
        self.reset()
        _instances.add(self)

    def reset(self) -> None:
        """Fresh in-process locks (in a forked child, whose other threads are gone)."""
        self._stripes = [threading.Lock() for _ in range(_STRIPES)]

    @contextlib.contextmanager
    def hold(self, *names: str) -> Iterator[None]:
        """Hold the locks of every name for the block.

        Raises:
            StorageError: a lock stayed taken (by another thread or process) for
                ``timeout`` seconds; the message says which.
        """
        deadline = time.monotonic() + self.timeout
        stripes = sorted({zlib.crc32(name.encode()) % _STRIPES for name in names})
        with contextlib.ExitStack() as stack:
            for stripe in stripes:
                lock = self._stripes[stripe]
                if not lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                    raise self._timeout(names, "another thread of this process was holding it")
                stack.callback(lock.release)
            for name in sorted(set(names)):
                stack.enter_context(self._flock(name, deadline))
            yield

    @contextlib.contextmanager
    def hold_shared(self, *names: str) -> Iterator[None]:
        """Share the locks of every name whose lock file exists, for the block: a reader
        that must not change the storage (a read-only one) waits for writers without
        creating a lock file. A name without one is not locked (no writer has used it).

        Raises:
            StorageError: a writer held a lock for ``timeout`` seconds.
        """
        deadline = time.monotonic() + self.timeout
        with contextlib.ExitStack() as stack:
            for name in sorted(set(names)):
                stack.enter_context(self._flock(name, deadline, shared=True))
            yield

    @contextlib.contextmanager
    def _flock(self, name: str, deadline: float, *, shared: bool = False) -> Iterator[None]:
        import fcntl

        path = self.directory / name
        try:
            fd = os.open(path, os.O_RDONLY if shared else os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError as exc:
            if not shared:
                raise storage_error(exc, "open the lock file", path) from exc
            yield  # no lock file: nothing to share (and nothing is created)
            return
        except OSError as exc:
            raise storage_error(exc, "open the lock file", path) from exc
        _held_fds[fd] = threading.get_ident()
        try:
            pause = 0.0005
            while True:
                try:
                    fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        holder = "another process was holding it (or another checkpointer"
                        holder += " on the same directory in this process)"
                        raise self._timeout([name], holder) from None
                    # flock cannot wait with a timeout: poll, backing off to 20 ms
                    time.sleep(pause)
                    pause = min(pause * 2, 0.02)
            yield
        finally:
            del _held_fds[fd]
            os.close(fd)  # closing the descriptor releases the lock

    def _timeout(self, names: Sequence[str], holder: str) -> StorageError:
        return StorageError(
            f"waited {self.timeout:g} s for the lock of {', '.join(sorted(names))!r} in "
            f"{str(self.directory)!r}: {holder}; retry later, or raise lock_timeout if "
            "writes of one thread take that long"
        )

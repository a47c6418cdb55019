"""Thread claims for backends whose storage lives on this machine (files, SQLite).

A claim is an ``fcntl.flock`` on one lock file per thread, named by the SHA-256 of the
thread id (so any id is a safe, fixed-length file name). The kernel releases the lock
when its holder exits, however it dies, so a killed run never leaves its thread claimed.
flock locks belong to an open file, not to a process, so a second claim from another
thread of the same process is refused too. The lock file holds a JSON line describing
the holder, for the error message; it is removed on release.

Who holds a claim is read without taking it (:meth:`LockFileClaims.holder`): from the
kernel's table of locks (``/proc/locks``), so a look never makes a claim attempt fail,
and without creating anything, so it works on read-only storage. Where that table does
not exist, a shared lock held for an instant answers instead.

:class:`ProcessClaims` is the in-process version, for storage no other process can see
(``memory://``). :func:`hold` and :func:`ahold` wait for a busy claim, for any backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import json
import math
import os
import random
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from statekeeper._storage.files import storage_error
from statekeeper.errors import ConfigurationError, ThreadBusyError

__all__ = [
    "LockFileClaims",
    "ProcessClaims",
    "ahold",
    "busy_error",
    "check_wait",
    "hold",
    "holder_info",
]

Attempt = Callable[[], AbstractContextManager[None]]
_FIRST_PAUSE = 0.002  # seconds between attempts on a busy claim, doubling up to _MAX_PAUSE
_MAX_PAUSE = 0.05


def holder_info() -> dict[str, Any]:
    """Who is claiming: this process, on this host, from now."""
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return {"pid": os.getpid(), "host": socket.gethostname(), "since": now}


def busy_error(thread_id: str, holder: dict[str, Any]) -> ThreadBusyError:
    """The error for a claim refused because ``holder`` has it."""
    who = ", ".join(f"{key} {holder[key]}" for key in ("pid", "host", "since") if key in holder)
    return ThreadBusyError(
        f"thread {thread_id!r} is being run by another process ({who or 'unknown holder'}); "
        "wait for that run to finish or stop it, then retry",
        thread_id=thread_id,
        holder=holder,
    )


class LockFileClaims:
    """Claims as lock files under ``directory`` (created on first use)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, thread_id: str) -> Path:
        """The lock file of ``thread_id``."""
        name = hashlib.sha256(thread_id.encode("utf-8", "surrogatepass")).hexdigest()
        return self.directory / name

    @contextlib.contextmanager
    def claim(self, thread_id: str) -> Iterator[None]:
        import fcntl

        path = self.path(thread_id)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            while True:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = _read_holder(fd)
                    if not holder:  # locked, not yet described: the holder writes it next
                        time.sleep(0.001)
                        holder = _read_holder(fd)
                    os.close(fd)
                    raise busy_error(thread_id, holder) from None
                if _same_file(fd, path):
                    break
                os.close(fd)  # a releasing holder removed the file we opened: retry
        except OSError as exc:
            raise storage_error(exc, "claim the thread with lock file", path) from exc
        try:
            info = dict(holder_info(), thread_id=thread_id)
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode() + b"\n", 0)
            yield
        finally:
            # remove while still holding the lock, so nobody locks a file about to vanish
            with contextlib.suppress(OSError):
                path.unlink()
            os.close(fd)

    def holder(self, thread_id: str) -> dict[str, Any] | None:
        """Who holds the claim on ``thread_id`` (``None``: nobody), without taking it and
        without creating anything. A lock file left by a holder that died is not held.

        Raises:
            StorageError: the lock file exists but cannot be read.
        """
        path = self.path(thread_id)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None  # also when the directory does not exist
        except OSError as exc:
            raise storage_error(exc, "read the claim of the thread in", path) from exc
        try:
            held = _locked(fd)
            return dict(_read_holder(fd), thread_id=thread_id) if held else None
        finally:
            os.close(fd)


class ProcessClaims:
    """Claims held in this process only."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, dict[str, Any]] = {}

    @contextlib.contextmanager
    def claim(self, thread_id: str) -> Iterator[None]:
        with self._lock:
            if thread_id in self._held:
                raise busy_error(thread_id, self._held[thread_id])
            self._held[thread_id] = dict(holder_info(), thread=threading.get_ident())
        try:
            yield
        finally:
            with self._lock:
                del self._held[thread_id]

    def holder(self, thread_id: str) -> dict[str, Any] | None:
        """Who holds the claim on ``thread_id`` (``None``: nobody)."""
        with self._lock:
            held = self._held.get(thread_id)
            return dict(held, thread_id=thread_id) if held is not None else None


def check_wait(wait: float | None) -> float | None:
    """``wait`` if it is ``None`` or a number of seconds >= 0 (``math.inf`` included)."""
    if wait is None:
        return None
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not wait >= 0:
        raise ConfigurationError(
            f"wait must be None (do not wait) or a number of seconds >= 0, got {wait!r}"
        )
    return float(wait)


@contextlib.contextmanager
def hold(attempt: Attempt, wait: float | None) -> Iterator[None]:
    """Hold the claim ``attempt()`` takes for the ``with`` block; while it is busy, try
    again until ``wait`` seconds have passed (``None``: do not wait), pausing a little
    longer each time (up to 50 ms, with jitter so that waiters spread out).

    Raises:
        ThreadBusyError: still busy when ``wait`` ran out (the last holder's error).
    """
    deadline = _deadline(check_wait(wait))
    with contextlib.ExitStack() as stack:
        pause = _FIRST_PAUSE
        while True:
            try:
                stack.enter_context(attempt())
                break
            except ThreadBusyError as exc:
                time.sleep(_pause_or_raise(exc, deadline, pause, wait))
                pause = min(pause * 2, _MAX_PAUSE)
        yield


@contextlib.asynccontextmanager
async def ahold(attempt: Attempt, wait: float | None) -> AsyncIterator[None]:
    """:func:`hold` for ``async with``: each attempt, and the release, run in a worker
    thread, and the waiting is ``asyncio.sleep``, so the event loop never blocks. A task
    cancelled during an attempt lets it finish and releases what it took."""
    deadline = _deadline(check_wait(wait))
    stack = contextlib.ExitStack()
    pause = _FIRST_PAUSE
    while True:
        taking = asyncio.ensure_future(asyncio.to_thread(stack.enter_context, attempt()))
        try:
            await asyncio.shield(taking)
            break
        except ThreadBusyError as exc:
            await asyncio.sleep(_pause_or_raise(exc, deadline, pause, wait))
            pause = min(pause * 2, _MAX_PAUSE)
        except asyncio.CancelledError:
            with contextlib.suppress(BaseException):
                await taking  # the attempt runs on in its thread: wait, then release
            stack.close()
            raise
    try:
        yield
    finally:
        await asyncio.to_thread(stack.close)


def _deadline(wait: float | None) -> float | None:
    if wait is None:
        return None
    return math.inf if math.isinf(wait) else time.monotonic() + wait


def _pause_or_raise(
    busy: ThreadBusyError, deadline: float | None, pause: float, wait: float | None
) -> float:
    """How long to sleep before the next attempt; raise ``busy`` when time is up."""
    left = 0.0 if deadline is None else deadline - time.monotonic()
    if left <= 0:
        if wait:  # say how long it waited: the holder may be stuck rather than slow
            raise ThreadBusyError(
                f"{busy} (waited {wait:g} s)", thread_id=busy.thread_id, holder=busy.holder
            ) from None
        raise busy
    return min(left, pause * random.uniform(0.5, 1.0))  # noqa: S311 (jitter, not secrets)


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == path.stat().st_ino
    except FileNotFoundError:
        return False


def _locked(fd: int) -> bool:
    """Whether another open file holds a lock on the file ``fd`` is open on. Read from
    the kernel's lock table when there is one; else (or when the table names the inode
    on another device, as stacked filesystems may) by taking a shared lock for an
    instant, which a claim attempt at that very instant would see as busy."""
    stat = os.fstat(fd)
    try:
        table = Path("/proc/locks").read_text(encoding="ascii", errors="replace")
    except OSError:
        table = ""
    # "1: FLOCK  ADVISORY  WRITE 4242 fe:00:1234 0 EOF"; a blocked waiter's line has "->"
    devices = {
        fields[5].rpartition(":")[0]
        for fields in (line.split() for line in table.splitlines())
        if len(fields) >= 6
        and fields[1] == "FLOCK"
        and fields[5].rpartition(":")[2] == str(stat.st_ino)
    }
    if f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}" in devices:
        return True
    if table and not devices:
        return False
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}

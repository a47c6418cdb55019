"""Thread claims for backends whose storage lives on this machine (files, SQLite).

A claim is an ``fcntl.flock`` on one lock file per thread, named by the SHA-256 of the
thread id (so any id is a safe, fixed-length file name). The kernel releases the lock
when its holder exits, however it dies, so a killed run never leaves its thread claimed.
flock locks belong to an open file, not to a process, so a second claim from another
thread of the same process is refused too. The lock file holds a JSON line describing
the holder, for the error message; it is removed on release.

:class:`ProcessClaims` is the in-process version, for storage no other process can see
(``memory://``).
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from statekeeper._storage.files import storage_error
from statekeeper.errors import ThreadBusyError

__all__ = ["LockFileClaims", "ProcessClaims", "busy_error", "holder_info"]


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

    @contextlib.contextmanager
    def claim(self, thread_id: str) -> Iterator[None]:
        import fcntl

        path = (
            self.directory / hashlib.sha256(thread_id.encode("utf-8", "surrogatepass")).hexdigest()
        )
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            while True:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
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


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == path.stat().st_ino
    except FileNotFoundError:
        return False


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}

"""One thread that serves an async API's calls in batches.

An async service calls a checkpointer from many conversations at once. Run each call in a
worker thread of its own (``asyncio.to_thread``) and every call pays a hop to a pool
thread and back, and the threads queue on the backend's connection, taking the
interpreter lock from the event loop as they wake. Here calls queue as jobs instead: one
thread takes every job waiting, hands the batch to the backend (which may store it in one
transaction or one round trip), then resolves the callers' futures with one callback per
event loop.

A job's caller resumes once the backend has finished the job: its result or its error.
A cancelled caller does not cancel its job (as with ``asyncio.to_thread``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["IDLE_SECONDS", "MAX_BATCH", "BatchWorker", "Job", "run_each"]

MAX_BATCH = 64  # jobs per batch: bounds how long one batch keeps the next waiting
IDLE_SECONDS = 2.0  # the thread stops after this long without a job


@dataclass(slots=True)
class Job:
    """What a caller asked for (``task``, the backend's to interpret), and the future it
    awaits; the backend sets ``result`` or ``error``."""

    task: Any
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    result: Any = None
    error: BaseException | None = None


class BatchWorker:
    """A thread that runs ``serve(batch)`` on the jobs queued, up to :data:`MAX_BATCH` at
    a time, in the order they came. Started when a job comes, gone after
    :data:`IDLE_SECONDS` without one (so an unclosed checkpointer leaves no thread
    behind), started anew in a forked child; :meth:`close` lets it finish what is queued.
    """

    def __init__(
        self, name: str, serve: Callable[[list[Job]], None], closed: Callable[[], Exception]
    ) -> None:
        self._name = name
        self._serve_batch = serve
        self._closed_error = closed  # raised by a call after close()
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._lock = threading.Lock()  # guards _thread, _jobs, _pid and _closed
        self._closed = False

    async def submit(self, task: Any) -> Any:
        """Queue ``task`` and wait for its result (or raise its error)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            if self._closed:
                raise self._closed_error()
            if self._pid != os.getpid():  # a forked child: the parent's thread is not here
                self._pid, self._jobs, self._thread = os.getpid(), queue.SimpleQueue(), None
            # queued before the thread is checked, so a thread that is leaving sees it
            self._jobs.put(Job(task, loop, future))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
        return await future

    @property
    def thread(self) -> threading.Thread | None:
        """The serving thread, if one is running."""
        return self._thread

    def close(self) -> None:
        """Let the thread finish the jobs already queued, then stop it. Idempotent."""
        with self._lock:
            self._closed = True
            thread = self._thread if self._pid == os.getpid() else None
            if thread is not None:
                self._jobs.put(None)
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        jobs = self._jobs
        while True:
            try:
                job = jobs.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    if jobs.empty():
                        self._thread = None
                        return
                continue
            if job is None:
                return
            batch = [job]
            while len(batch) < MAX_BATCH:
                try:
                    more = jobs.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    jobs.put(None)  # stop after this batch
                    break
                batch.append(more)
            try:
                self._serve_batch(batch)
            except BaseException as exc:  # a bug in serve must not strand its callers
                for each in batch:
                    if each.error is None:
                        each.error = exc
            _answer(batch)


def _answer(batch: list[Job]) -> None:
    """Resolve every job's future on its own loop, one callback per loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Job]] = {}
    for job in batch:
        by_loop.setdefault(job.loop, []).append(job)
    for loop, jobs in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
            loop.call_soon_threadsafe(_resolve, jobs)


def _resolve(jobs: list[Job]) -> None:
    for job in jobs:
        if job.future.done():  # the caller was cancelled
            continue
        if job.error is None:
            job.future.set_result(job.result)
        else:
            job.future.set_exception(job.error)


def run_each(batch: list[Job]) -> None:
    """The plainest ``serve``: each job's task is a function, called in turn."""
    for job in batch:
        try:
            job.result = job.task()
        except BaseException as exc:  # the caller's to raise, not the worker's
            job.error = exc

"""Move threads between checkpointers, directly or through a dump file.

>>> from statekeeper.checkpointers import open_checkpointer
>>> from statekeeper.transfer import copy_threads
>>> with open_checkpointer("sqlite:///state.db") as old, open_checkpointer(  # doctest: +SKIP
...     "redis://localhost:6379/0"
... ) as new:
...     copy_threads(old, new)

A thread arrives whole: every checkpoint of every namespace with its id, ``ts``, parent,
channel versions, ``versions_seen``, metadata and values, and every pending write with its
task id and task path, so ``get_state_history`` reads the same afterwards and the graph
resumes on the new storage. The source may be any LangGraph checkpointer (``InMemorySaver``,
``SqliteSaver``...); savers other than statekeeper's do not report task paths, so their
writes arrive with task path ``""``.

A transfer writes all of its threads or none: it refuses threads the target already has
before writing anything, and when it fails part-way (or is interrupted) it deletes the
threads it created, then raises. Nothing else should write those threads meanwhile.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self, TextIO

from langgraph.checkpoint.base import BaseCheckpointSaver

from statekeeper._storage.payload import check_id
from statekeeper.errors import ConfigurationError, ThreadExistsError, ThreadNotFoundError
from statekeeper.threads import list_threads
from statekeeper.transfer._dump import Contents, DumpWriter, read_dump
from statekeeper.transfer.records import Record, plan_thread, read_thread, write_calls

__all__ = [
    "CheckedDump",
    "Progress",
    "TransferStats",
    "check_dump",
    "copy_threads",
    "export_threads",
    "import_threads",
    "list_threads",
]

Progress = Callable[[int, int, int], None]
"""``progress(threads_done, threads_total, checkpoints_done)``, called after each checkpoint
(a thread counts as done once its last checkpoint is)."""


@dataclass(frozen=True)
class TransferStats:
    """What a transfer moved: threads, checkpoints and pending writes."""

    threads: int
    checkpoints: int
    writes: int


def copy_threads(
    source: BaseCheckpointSaver[Any],
    target: BaseCheckpointSaver[Any],
    thread_ids: Sequence[str] | None = None,
    *,
    progress: Progress | None = None,
) -> TransferStats:
    """Copy ``thread_ids`` (default: every thread) from ``source`` to ``target``, exactly
    (see the module docstring); all of them or none.

    Raises:
        ThreadExistsError: a thread already has checkpoints in ``target`` (the message
            names them); nothing was written.
        ThreadNotFoundError: a thread of ``thread_ids`` has no checkpoints in ``source``;
            nothing was written.
        SerializationError: a value cannot be copied unchanged; nothing is left written.
    """
    ids = _source_threads(source, thread_ids)
    tally = _Tally(len(ids), progress)
    with _Destination(target, ids) as destination:
        for thread_id in ids:
            refs = plan_thread(source, thread_id)
            for done, record in enumerate(read_thread(source, thread_id, refs), 1):
                destination.write(record)
                tally.add(record, thread_done=done == len(refs))
    return tally.stats()


def export_threads(
    source: BaseCheckpointSaver[Any],
    out: TextIO,
    thread_ids: Sequence[str] | None = None,
    *,
    progress: Progress | None = None,
) -> TransferStats:
    """Write ``thread_ids`` (default: every thread) of ``source`` to ``out`` as a dump
    (JSON Lines, see docs/dump-format.md), one checkpoint at a time. A dump whose export
    failed part-way has no trailer, so importing it fails as truncated.

    Raises:
        ThreadNotFoundError: a thread of ``thread_ids`` has no checkpoints; nothing was
            written to ``out``.
        SerializationError: a value, the checkpoint or its metadata cannot be dumped
            exactly.
    """
    ids = _source_threads(source, thread_ids)
    tally = _Tally(len(ids), progress)
    writer = DumpWriter(out)
    writer.header()
    for thread_id in ids:
        refs = plan_thread(source, thread_id)
        for done, record in enumerate(read_thread(source, thread_id, refs), 1):
            writer.record(record)
            tally.add(record, thread_done=done == len(refs))
    writer.trailer()
    return tally.stats()


def import_threads(
    target: BaseCheckpointSaver[Any], src: TextIO, *, progress: Progress | None = None
) -> TransferStats:
    """Store the threads of the dump ``src`` in ``target``; all of them or none.

    The whole dump is read and checked before anything is written (see
    :func:`check_dump`, which does that part alone: to check a dump before the target is
    even opened, call it and then :meth:`CheckedDump.import_into`).

    Raises:
        SerializationError: the dump is malformed, truncated, altered or of an unknown
            version, or holds a value that would not be rebuilt exactly; the message names
            the line. Nothing was written.
        ThreadExistsError: a thread of the dump already has checkpoints in ``target``;
            nothing was written.
    """
    with check_dump(src) as dump:
        return dump.import_into(target, progress=progress)


@contextlib.contextmanager
def check_dump(src: TextIO) -> Iterator[CheckedDump]:
    """Read and check the whole dump ``src``, touching no storage: its header and
    version, every record's shape, ids, payloads and parent links, and the trailer's
    counts and checksum. Payloads are decoded safely (nothing named in them is imported
    or called, except data classes of modules already imported). A stream that cannot
    seek is spooled to a temporary file, kept until the ``with`` block ends, for the
    second pass that :meth:`CheckedDump.import_into` makes.

    Raises:
        SerializationError: the dump is malformed, truncated, altered or of an unknown
            version, or holds a value that would not be rebuilt exactly; the message
            names the line.
    """
    with _two_passes(src) as read_again:
        contents = Contents()
        for _ in read_dump(read_again(), contents):
            pass
        yield CheckedDump(contents, read_again)


class CheckedDump:
    """A dump :func:`check_dump` read whole and found sound, ready to be stored."""

    def __init__(self, contents: Contents, read_again: Callable[[], Iterator[str]]) -> None:
        self._contents = contents
        self._read_again = read_again

    @property
    def threads(self) -> list[str]:
        """The dump's thread ids, in dump order."""
        return list(self._contents.checkpoints)

    def import_into(
        self, target: BaseCheckpointSaver[Any], *, progress: Progress | None = None
    ) -> TransferStats:
        """Store the dump's threads in ``target``; all of them or none (a failure part-way
        deletes the threads it wrote, then raises).

        Raises:
            ThreadExistsError: a thread of the dump already has checkpoints in
                ``target``; nothing was written.
        """
        left = dict(self._contents.checkpoints)
        tally = _Tally(len(left), progress)
        with _Destination(target, list(left)) as destination:
            for record in read_dump(self._read_again()):
                destination.write(record)
                left[record.thread_id] -= 1
                tally.add(record, thread_done=left[record.thread_id] == 0)
        return tally.stats()


# -- helpers ------------------------------------------------------------------------------


def _source_threads(
    source: BaseCheckpointSaver[Any], thread_ids: Sequence[str] | None
) -> list[str]:
    """The threads to move, each once; every one of them must have checkpoints."""
    if thread_ids is None:
        return list_threads(source)
    if isinstance(thread_ids, str):
        raise ConfigurationError(
            f"thread_ids must be a list of thread ids, not one string; write [{thread_ids!r}]"
        )
    ids = list(dict.fromkeys(check_id(thread_id, "thread_id") for thread_id in thread_ids))
    if missing := [thread_id for thread_id in ids if not _has_checkpoints(source, thread_id)]:
        raise ThreadNotFoundError(
            f"no thread{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))} "
            "in the source",
            thread_id=missing[0] if len(missing) == 1 else None,
        )
    return ids


def _has_checkpoints(saver: BaseCheckpointSaver[Any], thread_id: str) -> bool:
    config = {"configurable": {"thread_id": thread_id}}
    return next(iter(saver.list(config, limit=1)), None) is not None  # type: ignore[arg-type]


class _Destination:
    """Writes records into ``target`` and, if the ``with`` block fails, deletes every
    thread it wrote to (they had no checkpoints before), so ``target`` is left as it was.

    Raises (on entry):
        ThreadExistsError: a thread already has checkpoints in ``target``.
    """

    def __init__(self, target: BaseCheckpointSaver[Any], thread_ids: Iterable[str]) -> None:
        self.target = target
        self.thread_ids = list(thread_ids)
        self.created: dict[str, None] = {}

    def __enter__(self) -> Self:
        if taken := [t for t in self.thread_ids if _has_checkpoints(self.target, t)]:
            raise ThreadExistsError(
                f"the target already has checkpoints for thread(s) {', '.join(map(repr, taken))}"
                "; nothing was written: delete them there first or leave them out"
            )
        return self

    def write(self, record: Record) -> None:
        self.created[record.thread_id] = None  # before the put: a failed put may leave some
        stored = self.target.put(
            record.put_config(), record.checkpoint, record.metadata, record.new_versions
        )
        for task_id, task_path, writes in write_calls(record.writes):
            self.target.put_writes(stored, writes, task_id, task_path)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            return
        for thread_id in self.created:
            try:
                self.target.delete_thread(thread_id)
            except Exception as cleanup:  # keep the original error; say what is left
                exc.add_note(
                    f"thread {thread_id!r} was partly written to the target and could not "
                    f"be deleted again ({cleanup}); delete it before retrying"
                )


class _Tally:
    """Counts what was moved and reports progress after each checkpoint."""

    def __init__(self, threads_total: int, progress: Progress | None) -> None:
        self.threads_total = threads_total
        self.progress = progress
        self.threads = self.checkpoints = self.writes = 0

    def add(self, record: Record, *, thread_done: bool) -> None:
        self.checkpoints += 1
        self.writes += len(record.writes)
        self.threads += thread_done
        if self.progress is not None:
            self.progress(self.threads, self.threads_total, self.checkpoints)

    def stats(self) -> TransferStats:
        return TransferStats(self.threads, self.checkpoints, self.writes)


@contextlib.contextmanager
def _two_passes(src: TextIO) -> Iterator[Callable[[], Iterator[str]]]:
    """Yield ``read_again()``, which reads ``src`` from where it is now, each time anew:
    by seeking back when ``src`` can, else from a temporary copy made by the first read."""
    if src.seekable():
        start = src.tell()

        def seek_back() -> Iterator[str]:
            src.seek(start)
            return iter(src.readline, "")

        yield seek_back
        return
    with tempfile.TemporaryFile(
        "w+", encoding="utf-8", errors="surrogatepass", newline="\n"
    ) as spool:
        passes = 0

        def from_spool() -> Iterator[str]:
            nonlocal passes
            passes += 1
            if passes == 1:
                return _tee(src, spool)
            spool.seek(0)
            return iter(spool.readline, "")

        yield from_spool


def _tee(src: TextIO, copy: TextIO) -> Iterator[str]:
    for line in iter(src.readline, ""):
        yield line
        copy.write(line)

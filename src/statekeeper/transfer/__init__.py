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
resumes on the new storage. The source and the target may be any LangGraph checkpointer
(``InMemorySaver``, ``SqliteSaver``...): :func:`open_saver` opens statekeeper's backends
and LangGraph's ``SqliteSaver`` and ``PostgresSaver`` by URL (``langgraph+sqlite:///old.db``,
``langgraph+postgres://user@host/db``; docs/migrating.md), reading their writes with task
paths; other savers' writes arrive with task path ``""``.

Reading never unpickles or constructs anything but allowed data types. A value the
source's serde refuses (a pickle payload, an object of a type not allowed) is reported
with its thread, checkpoint and channel (:class:`~statekeeper.errors.Refusal`): the
transfer raises :class:`~statekeeper.errors.RefusedValuesError` listing every one, or
with ``skip_refused`` leaves those threads out and lists them in
:attr:`TransferStats.refusals`.

A transfer writes all of its threads or none: it refuses threads the target already has
before writing anything, and when it fails part-way (or is interrupted) it deletes the
threads it created, then raises. Nothing else should write those threads meanwhile.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self, TextIO

from langgraph.checkpoint.base import BaseCheckpointSaver

from statekeeper._storage.payload import check_id
from statekeeper.checkpointers import Checkpointer, known_schemes, open_checkpointer
from statekeeper.errors import (
    ConfigurationError,
    Refusal,
    RefusedValuesError,
    ThreadExistsError,
    ThreadNotFoundError,
)
from statekeeper.threads import list_threads
from statekeeper.transfer._dump import Contents, DumpWriter, read_dump
from statekeeper.transfer.records import Record, plan_thread, read_thread, write_calls
from statekeeper.urls import LANGGRAPH_SAVERS, parse_url

__all__ = [
    "CheckedDump",
    "Progress",
    "TransferStats",
    "check_dump",
    "copy_threads",
    "export_threads",
    "import_threads",
    "list_threads",
    "open_saver",
    "transfer_schemes",
]

Progress = Callable[[int, int, int], None]
"""``progress(threads_done, threads_total, checkpoints_done)``, called after each checkpoint
(a thread counts as done once its last checkpoint is)."""


@dataclass(frozen=True)
class TransferStats:
    """What a transfer moved: threads, checkpoints and pending writes; and, with
    ``skip_refused``, the values refused in the threads it left out."""

    threads: int
    checkpoints: int
    writes: int
    refusals: tuple[Refusal, ...] = ()


def transfer_schemes() -> list[str]:
    """The URL schemes :func:`open_saver` opens: statekeeper's backends', then LangGraph's
    savers' (``langgraph+sqlite``...)."""
    return [*known_schemes(), *(s for saver in LANGGRAPH_SAVERS for s in saver.schemes)]


def open_saver(
    url: str, *, read_only: bool = False, **options: Any
) -> AbstractContextManager[BaseCheckpointSaver[Any]]:
    """The saver at ``url``, as a context manager that closes it: a statekeeper backend
    (``open_checkpointer(url, **options)``), or LangGraph's own ``SqliteSaver`` /
    ``PostgresSaver`` for ``langgraph+sqlite://`` / ``langgraph+postgres://`` (no
    ``options``; their package must be installed). ``read_only`` opens LangGraph's savers
    without creating or migrating anything (a statekeeper URL takes ``mode="ro"``).

    Raises:
        ConfigurationError: the URL is malformed or its scheme unknown (the message lists
            :func:`transfer_schemes`), or the saver's package is not installed (the
            message names it).
        StorageNotFoundError: ``read_only`` and the storage does not exist.
    """
    parsed = parse_url(url, transfer_schemes())
    for saver in LANGGRAPH_SAVERS:
        if parsed.scheme in saver.schemes:
            if options:
                raise ConfigurationError(f"{parsed.scheme}:// URLs take no keyword options")
            from statekeeper.transfer._savers import open_langgraph_saver

            return open_langgraph_saver(saver, parsed, read_only=read_only)
    return open_checkpointer(url, **options)


def copy_threads(
    source: BaseCheckpointSaver[Any],
    target: BaseCheckpointSaver[Any],
    thread_ids: Sequence[str] | None = None,
    *,
    progress: Progress | None = None,
    skip_refused: bool = False,
) -> TransferStats:
    """Copy ``thread_ids`` (default: every thread) from ``source`` to ``target``, exactly
    (see the module docstring); all of them or none — or with ``skip_refused``, all of
    them but the threads holding a refused value.

    Raises:
        ThreadExistsError: a thread already has checkpoints in ``target`` (the message
            names them); nothing was written.
        ThreadNotFoundError: a thread of ``thread_ids`` has no checkpoints in ``source``;
            nothing was written.
        RefusedValuesError: without ``skip_refused``, the source's serde refused values
            (listed, each with its thread, checkpoint and channel); nothing is left written.
        SerializationError: a value cannot be copied unchanged; nothing is left written.
    """
    ids = _source_threads(source, thread_ids)
    reader = _Reader(source, _Tally(len(ids), progress), skip_refused=skip_refused)
    with _Destination(target, ids) as destination:
        for thread_id in ids:
            for record in reader.thread(thread_id):
                if not reader.failing:  # else only read on, to report every refusal
                    destination.write(record)
            if reader.refused(thread_id):
                destination.discard(thread_id)
        reader.finish()
    return reader.stats()


def export_threads(
    source: BaseCheckpointSaver[Any],
    out: TextIO,
    thread_ids: Sequence[str] | None = None,
    *,
    progress: Progress | None = None,
    skip_refused: bool = False,
) -> TransferStats:
    """Write ``thread_ids`` (default: every thread) of ``source`` to ``out`` as a dump
    (JSON Lines, see docs/dump-format.md), one checkpoint at a time. A dump whose export
    failed part-way has no trailer, so importing it fails as truncated. With
    ``skip_refused``, threads holding a refused value are left out: each thread is read
    once to check it before it is written (so it is read twice).

    Raises:
        ThreadNotFoundError: a thread of ``thread_ids`` has no checkpoints; nothing was
            written to ``out``.
        RefusedValuesError: without ``skip_refused``, the source's serde refused values
            (listed); the dump has no trailer.
        SerializationError: a value, the checkpoint or its metadata cannot be dumped
            exactly.
    """
    ids = _source_threads(source, thread_ids)
    reader = _Reader(source, _Tally(len(ids), progress), skip_refused=skip_refused)
    writer = DumpWriter(out)
    writer.header()
    for thread_id in ids:
        if skip_refused and not reader.check(thread_id):
            continue
        for record in reader.thread(thread_id):
            if not reader.failing:  # else only read on, to report every refusal
                writer.record(record)
    reader.finish()
    writer.trailer()
    return reader.stats()


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
        listed = getattr(source, "thread_ids", None)  # LangGraph's savers opened by URL
        return list(listed()) if callable(listed) else list_threads(source)
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
        # every value of each checkpoint written of one thread, for a target other than
        # statekeeper's (see _whole): references to the values read, not copies
        self._values: dict[tuple[str, str | None], dict[str, Any]] = {}
        self._values_of: str | None = None

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
            record.put_config(), self._whole(record), record.metadata, record.new_versions
        )
        for task_id, task_path, writes in write_calls(record.writes):
            self.target.put_writes(stored, writes, task_id, task_path)

    def discard(self, thread_id: str) -> None:
        """Delete what was written of ``thread_id`` (a thread left out part-way)."""
        if thread_id in self.created:
            del self.created[thread_id]
            self.target.delete_thread(thread_id)

    def _whole(self, record: Record) -> Any:
        """The checkpoint to ``put``: a record's, which holds only its new values, for a
        statekeeper target; with every value for another saver (``SqliteSaver`` stores
        the values in the checkpoint), from its parent's values and its new ones."""
        if isinstance(self.target, Checkpointer):
            return record.checkpoint
        if self._values_of != record.thread_id:
            self._values.clear()
            self._values_of = record.thread_id
        parent = self._values.get((record.checkpoint_ns, record.parent_id), {})
        values = {
            channel: value
            for channel, value in parent.items()
            if channel not in record.new_versions
            and channel in record.checkpoint["channel_versions"]
        }
        values.update(record.checkpoint["channel_values"])
        self._values[(record.checkpoint_ns, record.checkpoint_id)] = values
        return {**record.checkpoint, "channel_values": values}

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


class _Reader:
    """Reads threads' records from ``source``, collecting refusals: a thread with one is
    not passed on (what was of it is for the caller to discard), and :meth:`finish` raises
    them unless ``skip_refused``."""

    def __init__(
        self, source: BaseCheckpointSaver[Any], tally: _Tally, *, skip_refused: bool
    ) -> None:
        self.source = source
        self.tally = tally
        self.skip_refused = skip_refused
        self.refusals: list[Refusal] = []
        self._refused_threads: set[str] = set()

    @property
    def failing(self) -> bool:
        """Whether the transfer will fail: a value was refused, and not to be skipped."""
        return bool(self.refusals) and not self.skip_refused

    def thread(self, thread_id: str, *, count: bool = True) -> Iterator[Record]:
        """``thread_id``'s records, parents first, until a value of it is refused (then
        the rest of it is read for more refusals, and passed on to nobody). ``count``:
        count them in the stats and report progress."""
        refs = plan_thread(self.source, thread_id)
        before = len(self.refusals)
        for done, record in enumerate(read_thread(self.source, thread_id, refs, self.refusals), 1):
            if record is None or len(self.refusals) > before:
                self._refused_threads.add(thread_id)
                continue
            yield record
            if count:
                self.tally.add(record, thread_done=done == len(refs))

    def check(self, thread_id: str) -> bool:
        """Read ``thread_id`` through, keeping nothing: whether no value of it is refused."""
        for _ in self.thread(thread_id, count=False):
            pass
        return not self.refused(thread_id)

    def refused(self, thread_id: str) -> bool:
        return thread_id in self._refused_threads

    def finish(self) -> None:
        """Raise :class:`RefusedValuesError` for the refusals met, unless skipping."""
        if self.refusals and not self.skip_refused:
            shown = "\n".join(f"  {refusal}" for refusal in self.refusals[:20])
            more = len(self.refusals) - 20
            raise RefusedValuesError(
                f"{len(self.refusals)} stored value(s) in {len(self._refused_threads)} "
                "thread(s) were refused, so nothing was moved (skip_refused / "
                f"--skip-refused moves the other threads):\n{shown}"
                + (f"\n  ... and {more} more" if more > 0 else ""),
                tuple(self.refusals),
            )

    def stats(self) -> TransferStats:
        return self.tally.stats(tuple(self.refusals))


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

    def stats(self, refusals: tuple[Refusal, ...] = ()) -> TransferStats:
        return TransferStats(self.threads, self.checkpoints, self.writes, refusals)


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

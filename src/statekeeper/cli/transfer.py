"""Commands that move threads between storages: ``copy``, ``export`` and ``import``, each
with its arguments next to its handler.

They report progress on stderr (a bar, only on a terminal and not with ``-q``) and how
many threads, checkpoints and writes they moved. Their URLs may also name LangGraph's own
savers (``langgraph+sqlite:///old.db``, ``langgraph+postgres://...``: docs/migrating.md).
A value the source's serde refuses stops ``copy`` and ``export`` with every refusal
listed (exit 5, nothing moved); with ``--skip-refused`` the other threads are moved, the
refused ones listed, and the exit is 5 still. ``copy`` and ``import`` create nothing on
failure: everything that can be checked is checked before the target is opened, and
storage they created is discarded again if writing fails.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from statekeeper import _console
from statekeeper.cli._common import (
    EXIT,
    CommandError,
    Commands,
    emit,
    flush_stdout,
    info,
    not_found,
    open_saver,
    plural,
    progress,
    stdin,
    stdout_errors,
)
from statekeeper.cli._discard import New, discard_if_empty, find_new
from statekeeper.urls import redact

_SKIP_HELP = (
    "move the threads that hold no refused value and list the others (exit 5); "
    "default: a refused value stops the command and nothing is moved"
)

__all__ = ["add_copy", "add_export", "add_import"]


def add_copy(commands: Commands) -> None:
    sub = commands.add(
        "copy",
        cmd_copy,
        "copy threads from one storage URL to another",
        examples=(
            "statekeeper copy sqlite:///.statekeeper/state.db 'redis://127.0.0.1:6379/0?prefix=prod'",
            "statekeeper copy sqlite:///old.db file:///var/lib/agent --thread t1 --thread t2",
        ),
    )
    sub.add_argument("source", metavar="SRC_URL")
    sub.add_argument("target", metavar="DST_URL")
    sub.add_argument(
        "--thread",
        action="append",
        metavar="ID",
        help="copy this thread (repeatable; default: all)",
    )
    sub.add_argument("--skip-refused", action="store_true", help=_SKIP_HELP)


def cmd_copy(args: argparse.Namespace) -> int:
    """Copy the ``--thread`` threads (default: all) from ``SRC_URL`` to ``DST_URL``,
    exactly; threads the target already has are refused (exit 5).

    Creates nothing on failure: the source is read and the threads to copy are found
    before the target is opened (a missing source, a missing thread or an unreachable
    target leaves no new database, directory or key behind), and a copy that fails
    part-way deletes the threads it wrote, then the target storage if it created it
    (:mod:`statekeeper.cli._discard`).
    """
    from statekeeper.transfer import copy_threads

    bar, report = _progress("copy")
    with _open(args.source, read_only=True) as source:
        thread_ids = _source_threads(source, args)
        new = find_new(args.target)
        with _open(args.target) as target, _discarded_on_failure(target, new):
            try:
                stats = copy_threads(
                    source, target, thread_ids, progress=report, skip_refused=args.skip_refused
                )
            finally:
                bar.done()
    emit(
        args,
        stats,
        lambda: f"copied {_counts(stats)} from {redact(args.source)} to {redact(args.target)}",
    )
    return _refused(stats)


def _source_threads(source: Any, args: argparse.Namespace) -> list[str]:
    """The threads to copy: every thread of the source, or the ``--thread`` ids, each
    once; one the source does not hold is not found (exit 3)."""
    from statekeeper.threads import list_threads

    if not args.thread:
        listed = getattr(source, "thread_ids", None)  # LangGraph's savers opened by URL
        return list(listed()) if callable(listed) else list_threads(source)
    thread_ids = list(dict.fromkeys(args.thread))
    for thread_id in thread_ids:
        config = {"configurable": {"thread_id": thread_id}}
        if next(iter(source.list(config, limit=1)), None) is None:
            raise not_found(args.source, thread_id)
    return thread_ids


def add_export(commands: Commands) -> None:
    sub = commands.add(
        "export",
        cmd_export,
        "write threads to a JSON Lines dump",
        examples=(
            "statekeeper export -o backup.jsonl",
            "statekeeper export --thread t1 | gzip > t1.jsonl.gz",
        ),
    )
    sub.add_argument(
        "--thread",
        action="append",
        metavar="ID",
        help="export this thread (repeatable; default: all)",
    )
    sub.add_argument(
        "-o", "--output", default="-", metavar="FILE", help="dump file (default: stdout)"
    )
    sub.add_argument("--skip-refused", action="store_true", help=_SKIP_HELP)


def cmd_export(args: argparse.Namespace) -> int:
    """Write the ``--thread`` threads (default: all) as a JSON Lines dump to ``--output``
    (default: stdout); the summary goes to stderr (not with ``-q``), so stdout holds only
    the dump."""
    from statekeeper.transfer import export_threads

    bar, report = _progress("export")
    with _open(args.db, read_only=True) as saver, _output(args.output) as out:
        try:
            stats = export_threads(
                saver, out, args.thread or None, progress=report, skip_refused=args.skip_refused
            )
        finally:
            bar.done()
    info(_console.dumps(stats) if args.json else f"exported {_counts(stats)}")
    return _refused(stats)


def add_import(commands: Commands) -> None:
    sub = commands.add(
        "import",
        cmd_import,
        "load threads from a JSON Lines dump",
        examples=(
            "statekeeper --db file://./restored import backup.jsonl",
            "gunzip -c t1.jsonl.gz | statekeeper import -",
        ),
    )
    sub.add_argument("file", metavar="FILE", help="dump file ('-' for stdin)")


def cmd_import(args: argparse.Namespace) -> int:
    """Load the dump ``FILE`` (``-``: stdin).

    Creates nothing on failure: the whole dump is read and checked before the target is
    even opened, so a corrupt, truncated or crafted dump leaves no new database,
    directory or key behind; threads the target already has are refused (exit 5) before
    anything is written, and an import that fails part-way deletes the threads it wrote,
    then the target storage if it created it (:mod:`statekeeper.cli._discard`).
    """
    from statekeeper.transfer import check_dump

    bar, report = _progress("import")
    with _input(args.file) as src, check_dump(src) as dump:
        new = find_new(args.db)
        with _open(args.db) as saver, _discarded_on_failure(saver, new):
            try:
                stats = dump.import_into(saver, progress=report)
            finally:
                bar.done()
    emit(
        args,
        stats,
        lambda: f"imported {_counts(stats)} into {redact(args.db)}",
    )
    return EXIT["ok"]


# -- shared by the transfers --------------------------------------------------------------


def _open(url: str, *, read_only: bool = False) -> Any:
    """The saver at ``url``: a statekeeper backend as ``--db`` opens it, or one of
    LangGraph's savers (``statekeeper.transfer.open_saver``)."""
    from statekeeper.checkpointers import known_schemes
    from statekeeper.transfer import open_saver as open_any
    from statekeeper.transfer import transfer_schemes
    from statekeeper.urls import parse_url

    if parse_url(url, transfer_schemes()).scheme in known_schemes():
        return open_saver(url, read_only=read_only)
    return open_any(url, read_only=read_only)


@contextlib.contextmanager
def _discarded_on_failure(target: Any, new: New) -> Iterator[None]:
    """On any failure of the block (Ctrl-C too), once the transfer has deleted the
    threads it wrote: discard the target storage if this command created it and it
    holds nothing (:mod:`statekeeper.cli._discard`); then let the failure go on."""
    try:
        yield
    except BaseException:
        discard_if_empty(target, new)
        raise


def _refused(stats: Any) -> int:
    """List the refusals of a transfer that skipped them on stderr: exit 5 if any."""
    if not stats.refusals:
        return EXIT["ok"]
    threads = len({refusal.thread_id for refusal in stats.refusals})
    print(
        f"left out {plural(threads, 'thread')} holding refused values:",
        *(f"  {_console.escape(str(refusal))}" for refusal in stats.refusals),
        sep="\n",
        file=sys.stderr,
    )
    return EXIT["refused"]


def _progress(label: str) -> tuple[_console.Progress, Callable[[int, int, int], None]]:
    bar = progress(label)

    def report(threads_done: int, threads_total: int, checkpoints: int) -> None:
        bar.update(threads_done, threads_total, f"threads, {checkpoints} checkpoints")

    return bar, report


def _counts(stats: Any) -> str:
    return (
        f"{plural(stats.threads, 'thread')} ({plural(stats.checkpoints, 'checkpoint')}, "
        f"{plural(stats.writes, 'write')})"
    )


def _output(path: str) -> AbstractContextManager[Any]:
    if path == "-":
        return _Stdout()
    if not path:
        raise CommandError("-o/--output '': no file named; give a path, or - for stdout")
    return Path(path).open("w", encoding="utf-8", newline="\n")


def _input(path: str) -> AbstractContextManager[Any]:
    """The dump ``path`` (``-``: stdin) as text. Bytes that are not UTF-8 are read as
    lone surrogates (``surrogateescape``), which the dump's reader refuses naming the
    line they are on, rather than failing on whichever line decoding reached first."""
    if path == "-":
        return contextlib.nullcontext(stdin())  # not this command's to close
    if not path:
        raise CommandError("FILE '': no file named; give the dump's path, or - for stdin")
    try:
        return Path(path).open(encoding="utf-8", errors="surrogateescape", newline="\n")
    except OSError as exc:
        raise CommandError(f"cannot read {path!r}: {exc.strerror}") from None


class _Stdout(AbstractContextManager[Any]):
    """stdout as a dump's output, not closed at the end but flushed; a write that fails
    (``> /dev/full``) is :class:`~statekeeper.cli._common.OutputFailed`."""

    def __enter__(self) -> _Stdout:
        return self

    def write(self, text: str) -> int:
        with stdout_errors():
            return sys.stdout.write(text)

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            flush_stdout()

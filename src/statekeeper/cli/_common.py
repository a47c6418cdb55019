"""What every command shares: how it is added to the parser, how it opens ``--db``, how
it prints its result (and what happens when stdout cannot take it), what it says on
stderr (``-q`` / ``-v``), how it asks before it deletes, which exit code each error means
(:data:`EXIT`), and the one wording of what is missing. How an error is then reported is
:mod:`statekeeper.cli._report`.

``statekeeper --help`` builds every command's parser, so what a command runs (graphs,
transfer, memory) is imported inside its handler, never when its module is imported;
tests/test_cli_surface.py checks that.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shlex
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TextIO

from statekeeper import _console
from statekeeper.errors import (
    AnswerRequiredError,
    ConfigurationError,
    InvalidIdError,
    InvalidInputError,
    NoPendingInterruptError,
    NothingToResumeError,
    ReadOnlyError,
    RefusedValuesError,
    StatekeeperError,
    StorageNotFoundError,
    ThreadBusyError,
    ThreadExistsError,
    ThreadNotFoundError,
)
from statekeeper.urls import redact

EXIT = {
    "ok": 0,
    "failed": 1,
    "usage": 2,
    "not_found": 3,
    "busy": 4,
    "refused": 5,
    "read_only": 6,
    "interrupted": 10,
    "stopped": 130,
    "closed_pipe": 141,
}
"""Every exit code by name; the name is also the ``code`` of the JSON error object."""

Handler = Callable[[argparse.Namespace], int]


class CommandError(Exception):
    """A problem with the command line itself, reported with exit code 2."""


class IncompleteCommand(Exception):
    """Arguments argparse accepted that still do not make a command (``prune`` with no
    thread and no ``--all``, or with both): reported like argparse's own errors, with the
    usage."""


class NodeFailed(Exception):
    """A node of the graph raised; the thread keeps its last completed step."""


class Declined(Exception):
    """The user answered no to a confirmation: nothing was done (exit 5)."""


class Missing(LookupError):
    """Something the command line names that is not a thread or a checkpoint (a memory
    note) is not there (exit 3)."""


class OutputFailed(Exception):
    """stdout cannot be written (a full disk, a bad descriptor): what the command did
    stands, what it printed is lost (exit 1). A closed pipe is not this: it exits 141."""


# most specific first: the first match decides the exit code
_ERROR_EXITS: list[tuple[type[Exception], int]] = [
    (CommandError, EXIT["usage"]),
    (NodeFailed, EXIT["failed"]),
    (Declined, EXIT["refused"]),
    (Missing, EXIT["not_found"]),
    (OutputFailed, EXIT["failed"]),
    (ThreadNotFoundError, EXIT["not_found"]),
    (StorageNotFoundError, EXIT["not_found"]),
    (ReadOnlyError, EXIT["read_only"]),
    (ThreadBusyError, EXIT["busy"]),
    (ThreadExistsError, EXIT["refused"]),
    (RefusedValuesError, EXIT["refused"]),
    (NothingToResumeError, EXIT["refused"]),
    (NoPendingInterruptError, EXIT["refused"]),
    (AnswerRequiredError, EXIT["interrupted"]),  # still waiting: same as a run that stopped
    (InvalidInputError, EXIT["usage"]),
    (InvalidIdError, EXIT["usage"]),
    (ConfigurationError, EXIT["usage"]),
    (StatekeeperError, EXIT["failed"]),
]

# the errors a command reports as one message on stderr, with the exit code of
# exit_code(); an OSError is one too (a path that cannot be read or written)
REPORTED: tuple[type[Exception], ...] = (*(kind for kind, _ in _ERROR_EXITS), OSError)


def exit_code(exc: Exception, argv: Sequence[str] = ()) -> int:
    """The exit code that reports ``exc``: see :data:`statekeeper.cli.EXIT`. An
    ``OSError`` on a path the command line names (``argv``) is bad usage; any other
    failed."""
    if isinstance(exc, OSError):
        named = exc.filename is not None and os.fspath(exc.filename) in _paths(argv)
        return EXIT["usage"] if named else EXIT["failed"]
    return next((code for kind, code in _ERROR_EXITS if isinstance(exc, kind)), EXIT["failed"])


def _paths(argv: Sequence[str]) -> set[str]:
    """Every path the command line may name: each argument, and each ``--opt=value``
    and ``@file`` value."""
    found = set(argv)
    found |= {arg.partition("=")[2] for arg in argv if arg.startswith("--")}
    return found | {arg[1:] for arg in argv if arg.startswith("@")}


class Parser(argparse.ArgumentParser):
    """argparse's parser, except that a help or usage text it cannot write to stdout
    (``--help > /dev/full``) fails the command (exit 1) instead of being dropped: argparse
    ignores the write error and exits 0. Subcommands' parsers are of this class too."""

    def _print_message(self, message: str, file: Any = None) -> None:
        if not message or file is not sys.stdout:
            super()._print_message(message, file)
            return
        with stdout_errors():
            file.write(message)
            file.flush()


class Commands:
    """The subcommands of one parser. Each command gets the global options (``--db``,
    ``--json``, ``-v``, ``-q``; also accepted after its name), its one line of text as
    help and description, its examples at the end of its ``--help``, and its handler as
    ``args.handler``, which :func:`statekeeper.cli.main` calls."""

    def __init__(
        self, parser: argparse.ArgumentParser, *, dest: str, common: argparse.ArgumentParser
    ) -> None:
        self._subparsers = parser.add_subparsers(dest=dest, required=True, metavar="COMMAND")
        self._common = common

    def add(
        self, name: str, handler: Handler, text: str, *, examples: Sequence[str]
    ) -> argparse.ArgumentParser:
        """Add the command ``name``; return its parser, for its own arguments.
        ``examples`` are command lines (a ``# comment`` may follow one), shown as typed."""
        sub = self._subparsers.add_parser(
            name,
            parents=[self._common],
            help=text,
            description=text,
            epilog=examples_text(examples),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sub.set_defaults(handler=handler)
        return sub

    def group(self, parser: argparse.ArgumentParser, dest: str) -> Commands:
        """The subcommands of the command ``parser`` (``memory search``); one is required."""
        return Commands(parser, dest=dest, common=self._common)


Adder = Callable[[Commands], None]


def examples_text(examples: Sequence[str]) -> str:
    """The ``Examples:`` section of a ``--help``: one command line a line, indented."""
    if not examples:
        raise ValueError("every command shows at least one example in its --help")
    return "Examples:\n" + "\n".join(f"  {line}" for line in examples)


# -- what a command says on stderr besides its errors: -q and -v --------------------------


class Verbosity:
    """How much a command says on stderr besides its errors, set by
    :func:`statekeeper.cli.main` for the command it runs: ``-q`` nothing (no progress
    bar, no summary, no warning), ``-v`` also debug detail (the storage opened and how,
    how long the command took, the library's debug log)."""

    quiet = False
    verbose = False


def info(text: str) -> None:
    """Say ``text`` on stderr (a summary, a note), unless ``-q``."""
    if not Verbosity.quiet:
        print(text, file=sys.stderr)


def debug(text: str) -> None:
    """Say ``text`` on stderr with ``-v`` only, as ``statekeeper: text``."""
    if Verbosity.verbose:
        print(f"statekeeper: {_console.escape(text)}", file=sys.stderr)


def progress(label: str) -> _console.Progress:
    """A progress bar on stderr: drawn only when stderr is a terminal and ``-q`` is not
    given, so pipes and logs stay clean."""
    return _console.Progress(label, enabled=not Verbosity.quiet and _console.is_terminal())


def answerable(args: argparse.Namespace, what: str) -> None:
    """Check, before anything is opened, that :func:`confirm` can be answered: by
    ``--yes``, or by someone at the terminal on stdin. A script or a pipe without
    ``--yes`` stops here with bad usage (exit 2), ``what`` saying what would be done."""
    if not getattr(args, "yes", False) and not _console.is_terminal(sys.stdin):
        raise CommandError(
            f"{what} asks for confirmation first, but stdin is not a terminal; "
            "pass --yes to go ahead (or --dry-run to see what it would delete)"
        )


def confirm(args: argparse.Namespace, question: str) -> None:
    """Ask ``question`` (``[y/N]``, on stderr) before a command deletes anything;
    ``--yes`` answers it. Anything but ``y``/``yes`` raises :class:`Declined` (exit 5),
    and nothing is done. See :func:`answerable` for stdin without a terminal."""
    if getattr(args, "yes", False):
        return
    answerable(args, "this command")
    print(f"{_console.escape(question)} [y/N] ", end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline().strip().casefold()
    if answer not in ("y", "yes"):
        raise Declined("answered no; nothing was deleted")


def read_only_options(url: str, schemes: list[str]) -> dict[str, Any]:
    """The options that open ``url`` read-only: ``mode=ro``, unless the URL sets a mode
    itself or is ``memory://`` (storage that lives only in this process: nothing to
    protect, nothing to find)."""
    from statekeeper.urls import parse_url

    parsed = parse_url(url, schemes)
    return {} if parsed.scheme == "memory" or "mode" in parsed.options else {"mode": "ro"}


def open_saver(url: str, *, read_only: bool = False) -> Any:
    """The checkpointer at ``url`` (``--db``), as a context manager.

    ``read_only``, for the commands that only read: opened with ``mode=ro`` unless the
    URL sets a mode itself, so they work on read-only storage and never create a
    database, a directory or a key; storage that does not exist is then
    :class:`StorageNotFoundError` ("no database at URL", exit 3), not a new empty one.
    """
    from statekeeper.checkpointers import known_schemes, open_checkpointer

    options = read_only_options(url, known_schemes()) if read_only else {}
    started = time.perf_counter()
    try:
        saver = open_checkpointer(url, **options)
    except StorageNotFoundError as exc:
        raise StorageNotFoundError(
            f"no database at {redact(url)} (nothing was created); check --db or STATEKEEPER_DB"
        ) from exc
    debug(
        f"opened {redact(url)} with {type(saver).__name__} "
        f"({'read-only' if getattr(saver, 'read_only', False) else 'read-write'}) "
        f"in {_ms(started)}"
    )
    return saver


def _ms(started: float) -> str:
    return f"{(time.perf_counter() - started) * 1000:.0f} ms"


def emit(args: argparse.Namespace, data: Any, text: Callable[[], str]) -> None:
    """Print ``data`` as JSON with ``--json``, else ``text()`` (built only when shown)."""
    shown = _console.dumps(data) if args.json else text()
    with stdout_errors():
        print(shown)


@contextlib.contextmanager
def stdout_errors() -> Iterator[None]:
    """Around a write to stdout: a failed write (``> /dev/full``) is :class:`OutputFailed`,
    one line on stderr; a closed pipe stays ``BrokenPipeError`` (exit 141, quietly)."""
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as exc:
        drop_stdout()  # what it still holds would fail the interpreter's last flush again
        raise OutputFailed(f"cannot write to stdout: {exc.strerror or exc}") from None


def flush_stdout() -> None:
    """Flush stdout, so that a closed pipe or a full disk is found while the command can
    still say so, not at the interpreter's exit."""
    with stdout_errors():
        sys.stdout.flush()


def closed_pipe() -> int:
    """Whoever read stdout stopped reading (``statekeeper threads | head -1``): exit
    quietly with 141, as a program killed by SIGPIPE reports in a shell, so a pipeline
    under ``set -o pipefail`` still sees that the output was cut short. stdout is
    pointed at the null device, so the interpreter's last flush cannot fail again."""
    drop_stdout()
    return EXIT["closed_pipe"]


def drop_stdout() -> None:
    """Point stdout at the null device: what it still buffers is dropped there, so the
    interpreter's last flush cannot fail again."""
    with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def stdin() -> TextIO:
    """``sys.stdin``, for an argument ``-`` that reads it; a closed stdin (``<&-``) is
    bad usage (exit 2)."""
    if sys.stdin is None:
        raise CommandError("stdin is closed, but '-' reads from it; pipe the input in")
    return sys.stdin


def threads_or_all(args: argparse.Namespace) -> None:
    """``THREAD... | --all``: raise :class:`IncompleteCommand` unless exactly one is
    given. Both is refused, not read as ``--all``: a named thread means only that one."""
    if not (args.all or args.threads):
        raise IncompleteCommand("name threads, or pass --all")
    if args.all and args.threads:
        raise IncompleteCommand("name threads or pass --all, not both")


REF_HELP = "an id, a unique prefix of 4+ characters, @STEP, head, or REF~N for an ancestor"
"""The help of an argument that names a checkpoint (see ``statekeeper.refs``)."""


def resolve(saver: Any, thread_id: str, ref: str, *, ns: str = "") -> Any:
    """The checkpoint tuple that the reference ``ref`` names in ``thread_id``
    (:func:`statekeeper.refs.resolve_checkpoint`): an ambiguous or malformed reference
    exits 2, one that names nothing 3."""
    from statekeeper.refs import resolve_checkpoint

    return resolve_checkpoint(saver, thread_id, ref, ns=ns)


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


MAX_LIMIT = 2**31 - 1
"""The largest ``--limit`` passed on: more than any listing shows, and a page size every
backend takes (``sys.maxsize`` would overflow SQLite's integers once paging adds one)."""


def at_least_one(text: str) -> int:
    """An argparse ``type``: a whole number of at least 1 (``--limit``). A larger one
    than :data:`MAX_LIMIT`, however many digits it has, is read as :data:`MAX_LIMIT`:
    it limits nothing either way."""
    try:
        value = int(text)
    except ValueError:
        if not text.strip().isdecimal():
            raise argparse.ArgumentTypeError(
                f"must be a whole number, got {quoted(text)}"
            ) from None
        value = MAX_LIMIT  # more digits than int() reads
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return min(value, MAX_LIMIT)


def command_line(*words: str) -> str:
    """A ``statekeeper`` command line to suggest, each word quoted for a POSIX shell
    and escaped (:func:`~statekeeper._console.escape`), so a hint can be pasted as shown."""
    return _console.escape(shlex.join(["statekeeper", *words]))


# -- one wording for what is missing ------------------------------------------------------


def not_found(
    url: str, thread_id: str, checkpoint_id: str | None = None, reason: str | None = None
) -> ThreadNotFoundError:
    """The error for a thread, or a checkpoint in it, that ``url`` does not hold: every
    command words it this way, with the command that lists what is there (and, for a
    checkpoint reference, ``reason``: why it named nothing)."""
    where = redact(url)
    if checkpoint_id is not None:
        why = f" ({reason})" if reason else ""
        return ThreadNotFoundError(
            f"no checkpoint {quoted(checkpoint_id)} in thread {thread_id!r} in {where}{why}; "
            f"`{command_line('history', thread_id, *db_option(url))}` lists its checkpoints",
            thread_id=thread_id,
            checkpoint_id=checkpoint_id,
            reason=reason,
        )
    return ThreadNotFoundError(
        f"no thread {thread_id!r} in {where}; `{command_line('threads', *db_option(url))}` "
        "lists the threads",
        thread_id=thread_id,
    )


def quoted(text: str, width: int = 60) -> str:
    """``text`` quoted, cut with an ellipsis when longer than ``width``."""
    shown = repr(text)
    return shown if len(shown) <= width else shown[: width - 1] + "…"


def db_option(url: str) -> list[str]:
    """The ``--db`` a suggested command needs to read ``url``: none when it is what
    ``--db`` defaults to; ``URL`` in place of a URL that holds a password."""
    from statekeeper.cli import DEFAULT_DB

    if url == (os.environ.get("STATEKEEPER_DB") or DEFAULT_DB):
        return []
    return ["--db", url if redact(url) == url else "URL"]

"""What every command shares: how it is added to the parser, how it opens ``--db``, how
it prints its result, what it says on stderr (``-q`` / ``-v``), how it asks before it
deletes, and how each error is reported: which exit code it means (:data:`EXIT`), its one
wording, and its JSON object under ``--json``.

``statekeeper --help`` builds every command's parser, so what a command runs (graphs,
transfer, memory) is imported inside its handler, never when its module is imported;
tests/test_cli_surface.py checks that.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import os
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from statekeeper import _console
from statekeeper.errors import (
    AmbiguousReferenceError,
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
    thread and no ``--all``): reported like argparse's own errors, with the usage."""


class NodeFailed(Exception):
    """A node of the graph raised; the thread keeps its last completed step."""


class Declined(Exception):
    """The user answered no to a confirmation: nothing was done (exit 5)."""


class Missing(LookupError):
    """Something the command line names that is not a thread or a checkpoint (a memory
    note) is not there (exit 3)."""


# most specific first: the first match decides the exit code
_ERROR_EXITS: list[tuple[type[Exception], int]] = [
    (CommandError, EXIT["usage"]),
    (NodeFailed, EXIT["failed"]),
    (Declined, EXIT["refused"]),
    (Missing, EXIT["not_found"]),
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
    print(_console.dumps(data) if args.json else text())


def threads_or_all(args: argparse.Namespace) -> None:
    """``THREAD... | --all``: raise :class:`IncompleteCommand` when neither is given."""
    if not (args.all or args.threads):
        raise IncompleteCommand("name threads, or pass --all")


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


def at_least_one(text: str) -> int:
    """An argparse ``type``: a whole number of at least 1 (``--limit``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


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
            f"no checkpoint {_shown(checkpoint_id)} in thread {thread_id!r} in {where}{why}; "
            f"`{command_line('history', thread_id, *_db(url))}` lists its checkpoints",
            thread_id=thread_id,
            checkpoint_id=checkpoint_id,
            reason=reason,
        )
    return ThreadNotFoundError(
        f"no thread {thread_id!r} in {where}; `{command_line('threads', *_db(url))}` lists "
        "the threads",
        thread_id=thread_id,
    )


def _shown(text: str, width: int = 60) -> str:
    """``text`` quoted, cut with an ellipsis when longer than ``width``."""
    quoted = repr(text)
    return quoted if len(quoted) <= width else quoted[: width - 1] + "…"


def _db(url: str) -> list[str]:
    """The ``--db`` a suggested command needs to read ``url``: none when it is what
    ``--db`` defaults to; ``URL`` in place of a URL that holds a password."""
    from statekeeper.cli import DEFAULT_DB

    if url == (os.environ.get("STATEKEEPER_DB") or DEFAULT_DB):
        return []
    return ["--db", url if redact(url) == url else "URL"]


# -- reporting an error -------------------------------------------------------------------

_OS_ADVICE = {
    errno.EISDIR: "is a directory; name a file",
    errno.ENOENT: "does not exist; check the path (its folder must exist)",
    errno.ENOTDIR: "is not a path to a file: a part of it is not a directory",
    errno.EACCES: "is not accessible (permission denied); check its permissions",
    errno.EPERM: "is not accessible (operation not permitted); check its permissions",
    errno.EROFS: "is on a read-only file system; choose another path",
    errno.ENOSPC: "cannot be written: no space left on the device",
    errno.EEXIST: "already exists; remove it or choose another path",
}


def describe(exc: BaseException, args: argparse.Namespace) -> str:
    """The message that reports ``exc`` for the command ``args``."""
    if isinstance(exc, ThreadNotFoundError) and exc.thread_id is not None:
        url = args.source if args.command == "copy" else args.db
        return str(not_found(url, exc.thread_id, exc.checkpoint_id, exc.reason))
    if isinstance(exc, OSError) and exc.filename is not None:
        path = os.fsdecode(exc.filename)
        advice = _OS_ADVICE.get(exc.errno or 0, f"cannot be used: {exc.strerror or exc}")
        return f"{path!r} {advice}"
    return str(exc)


def report(args: argparse.Namespace, exc: BaseException, code: int) -> int:
    """Report ``exc`` on stderr and return ``code``: ``statekeeper COMMAND: message``
    (each line escaped), or with ``--json`` one JSON object ``{"error": {"code",
    "message", "exit"}}`` (plus ``"type"``, the error's class in
    :mod:`statekeeper.errors`, ``"errors"`` for an invalid input, ``"candidates"``, the
    full ids, for an ambiguous checkpoint reference, ``"refusals"`` for refused values)."""
    message = describe(exc, args)
    if getattr(args, "json", False):
        error: dict[str, Any] = {"code": _name(code), "message": message, "exit": code}
        if isinstance(exc, StatekeeperError):
            error["type"] = type(exc).__name__
        if isinstance(exc, InvalidInputError):
            error["errors"] = [{"field": path, "message": text} for path, text in exc.errors]
        if isinstance(exc, AmbiguousReferenceError):
            error["candidates"] = list(exc.candidates)
        if isinstance(exc, RefusedValuesError):
            error["refusals"] = _console.jsonable(list(exc.refusals))
        print(_console.dumps({"error": error}, indent=None), file=sys.stderr)
    else:
        shown = "\n".join(_console.escape(line) for line in message.splitlines())
        print(f"statekeeper {_command(args)}: {shown}", file=sys.stderr)
    return code


def usage_error(parser: argparse.ArgumentParser, args: argparse.Namespace, text: str) -> NoReturn:
    """Stop with ``text`` as bad usage (exit 2): argparse's own error (with the usage),
    or with ``--json`` the JSON error object."""
    if not args.json:
        parser.error(f"{_command(args)}: {text}")
    report(args, CommandError(text), EXIT["usage"])
    raise SystemExit(EXIT["usage"])


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``parser.parse_args(argv)``; with ``--json`` on the command line, argparse's
    errors are the JSON error object too (``--help`` is printed as usual)."""
    words = argv[: argv.index("--")] if "--" in argv else argv
    if "--json" not in words:
        return parser.parse_args(argv)
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            return parser.parse_args(argv)
    except SystemExit as exc:
        said = captured.getvalue()
        if not exc.code:
            sys.stderr.write(said)
            raise
        last = said.strip().splitlines()[-1] if said.strip() else "bad usage"
        prog, _, text = last.partition(": error: ")
        command = argparse.Namespace(command=prog.removeprefix("statekeeper").strip(), json=True)
        report(command, CommandError(text or last), EXIT["usage"])
        raise


def closed_pipe() -> int:
    """Whoever read stdout stopped reading (``statekeeper threads | head -1``): exit
    quietly with 141, as a program killed by SIGPIPE reports in a shell, so a pipeline
    under ``set -o pipefail`` still sees that the output was cut short. stdout is
    pointed at the null device, so the interpreter's last flush cannot fail again."""
    with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return EXIT["closed_pipe"]


def _name(code: int) -> str:
    return next((name for name, value in EXIT.items() if value == code), "failed")


def _command(args: argparse.Namespace) -> str:
    """The command as typed: ``memory show`` for a subcommand."""
    command = str(getattr(args, "command", None) or "")
    sub = getattr(args, f"{command}_command", None)
    return f"{command} {sub}" if sub else command

"""The ``statekeeper`` command (also ``python -m statekeeper``): a thin shell over the API.

Every command opens the storage named by ``--db`` (env ``STATEKEEPER_DB``, default
``sqlite:///.statekeeper/state.db``), calls one public function, and prints a table, or
JSON with ``--json``. Progress bars and errors go to stderr. Exit codes (:data:`EXIT`):

====  ==========================================================================
 0    done
 1    failed: a storage error, a node raised, corrupt data found, invalid state
 2    bad usage: unknown option, malformed URL, JSON or graph reference
 3    not found: unknown thread or checkpoint, or no storage at ``--db``
 4    busy: another run holds the thread
 5    refused: the target thread exists, nothing to resume, or a confirmation said no
 6    read-only: a write to storage opened read-only or not writable
 10   interrupted: the run waits at an ``interrupt()``; answer with ``resume --answer``
 130  stopped by Ctrl-C (SIGINT)
 141  closed pipe: whoever read stdout stopped reading (``| head``); nothing is printed
====  ==========================================================================

A stdout that cannot be written (``> /dev/full``) is exit 1; one that is closed
(``>&-``) exit 2 before anything is done. A closed stderr drops the messages, never
mixing them into stdout.

With ``--json``, an error is one JSON object on stderr, ``{"error": {"code":
"not_found", "message": "...", "exit": 3}}``, whose ``code`` is the exit code's name in
:data:`EXIT` (see docs/cli.md).

The commands that only read (``threads``, ``history``, ``show``, ``diff``, ``export``,
``verify`` without ``--repair``, ``prune --dry-run``, and ``copy``'s source) open the
storage read-only, so they never create a database, directory or key. ``prune`` asks
before it deletes (``--yes`` in scripts). ``-q`` keeps stderr to errors; ``-v`` adds
what was opened and how long the command took.

Each command lives in the module of its kind, its arguments next to its handler:
:mod:`~statekeeper.cli.runs` (run, resume, fork, migrate),
:mod:`~statekeeper.cli.inspect` (threads, history, show, diff),
:mod:`~statekeeper.cli.transfer` (copy, export, import),
:mod:`~statekeeper.cli.maintenance` (prune, verify), :mod:`~statekeeper.cli.memory`,
:mod:`~statekeeper.cli.demo` and :mod:`~statekeeper.cli.completion`. This module only
assembles them, with the global options (``--db``, ``--json``, ``-v``, ``-q``,
``--version``).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from statekeeper.cli import (
    completion,
    demo,
    graph,
    inspect,
    maintenance,
    memory,
    runs,
    transfer,
    ui,
)
from statekeeper.cli._common import (
    EXIT,
    REPORTED,
    Adder,
    CommandError,
    Commands,
    IncompleteCommand,
    Parser,
    Verbosity,
    closed_pipe,
    debug,
    examples_text,
    exit_code,
    flush_stdout,
    stdout_errors,
)
from statekeeper.cli._report import parse, report, usage_error

__all__ = ["EXIT", "build_parser", "main"]

DEFAULT_DB = "sqlite:///.statekeeper/state.db"

# the commands in the order `statekeeper --help` lists them
_COMMANDS: tuple[Adder, ...] = (
    runs.add_run,
    runs.add_resume,
    inspect.add_threads,
    inspect.add_history,
    inspect.add_show,
    inspect.add_diff,
    runs.add_fork,
    transfer.add_copy,
    transfer.add_export,
    transfer.add_import,
    maintenance.add_prune,
    maintenance.add_verify,
    runs.add_migrate,
    memory.add_memory,
    graph.add_graph,
    demo.add_demo,
    ui.add_ui,
    completion.add_completion,
)


def _global_options(defaults: bool) -> argparse.ArgumentParser:
    """``--db``, ``--json``, ``-v`` and ``-q``, accepted before and after the command
    name. Only the top-level parser has defaults: a command's copy must not overwrite a
    value given before the command name."""
    options = argparse.ArgumentParser(add_help=False)
    db = os.environ.get("STATEKEEPER_DB") or DEFAULT_DB

    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    options.add_argument(
        "--db",
        default=default(db),
        metavar="URL",
        help=f"storage URL (env STATEKEEPER_DB; default {DEFAULT_DB})",
    )
    options.add_argument(
        "--json", action="store_true", default=default(False), help="print JSON for scripts"
    )
    options.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=default(False),
        help="also say on stderr what storage was opened and how long the command took",
    )
    options.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=default(False),
        help="say nothing on stderr but errors: no progress bar, summary or warning",
    )
    return options


class _Version(argparse.Action):
    """``--version``: the installed distribution's version, read only when asked."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            shown = version("statekeeper")
        except PackageNotFoundError:  # run from a source tree that was never installed
            shown = "unknown (not installed)"
        with stdout_errors():
            print(f"statekeeper {shown}")
        flush_stdout()  # here, where main() reports a failure, not at the interpreter's exit
        parser.exit()


_EXAMPLES = (
    "statekeeper run examples.approval_agent:graph --thread t1 --input '{\"messages\": []}'",
    "statekeeper threads",
    "statekeeper --db sqlite:///other.db history t1 --json",
    "statekeeper resume t1 --answer yes",
    "statekeeper COMMAND --help               # each command's options and examples",
)

_EXIT_CODES = """\
Exit codes:
  0 done, 1 failed, 2 bad usage, 3 not found, 4 busy, 5 refused (exists / nothing to
  resume / answered no), 6 read-only, 10 waiting at an interrupt(), 130 Ctrl-C,
  141 closed pipe"""


def build_parser() -> argparse.ArgumentParser:
    """The ``statekeeper`` parser: the global options and every command. Building it
    imports no command's dependencies, so ``statekeeper --help`` stays fast."""
    parser = Parser(
        prog="statekeeper",
        description="Run, resume, inspect and move LangGraph threads whose state must survive.",
        epilog=f"{examples_text(_EXAMPLES)}\n\n{_EXIT_CODES}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[_global_options(defaults=True)],
    )
    parser.add_argument("--version", action=_Version, help="print the version and exit")
    commands = Commands(parser, dest="command", common=_global_options(defaults=False))
    for add in _COMMANDS:
        add(commands)
    return parser


@contextlib.contextmanager
def _verbosity(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Iterator[None]:
    """Set :class:`Verbosity` (and the library's log level) from ``-q``/``-v`` for the
    command, and put both back afterwards (``main`` may be called again in-process)."""
    if args.quiet and args.verbose:
        usage_error(parser, args, "-q/--quiet and -v/--verbose say opposite things; pick one")
    log = logging.getLogger("statekeeper")
    level, propagate = log.level, log.propagate
    handler: logging.Handler | None = None
    if args.quiet:
        log.setLevel(logging.ERROR)
    elif args.verbose:
        handler = _StderrHandler()
        log.addHandler(handler)
        log.setLevel(logging.DEBUG)
        log.propagate = False  # said once, here, not again by a root handler
    Verbosity.quiet, Verbosity.verbose = args.quiet, args.verbose
    try:
        yield
    finally:
        Verbosity.quiet = Verbosity.verbose = False
        log.setLevel(level)
        log.propagate = propagate
        if handler is not None:
            log.removeHandler(handler)


class _StderrHandler(logging.Handler):
    """The library's log records on whatever ``sys.stderr`` is when one is emitted."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            print(
                f"statekeeper: {record.levelname.lower()}: {record.name}: {record.getMessage()}",
                file=sys.stderr,
            )
        except Exception:
            self.handleError(record)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); return the exit code.

    Whatever a user can cause ends in one message on stderr, never a traceback:
    ``statekeeper COMMAND: message``, or with ``--json`` one JSON object
    ``{"error": {"code": ..., "message": ..., "exit": ...}}`` (``code`` names the exit
    code, as in :data:`EXIT`). A closed pipe on stdout (``| head``) exits 141 quietly; a
    stdout that cannot be written (``> /dev/full``) exits 1, one closed before the start
    (``>&-``) 2 with nothing done. Only a node's own exception (exit 1) is shown with the
    last frames of its traceback.
    """
    words = sys.argv[1:] if argv is None else list(argv)
    if sys.stderr is None:  # started with stderr closed: its messages must not reach stdout
        sys.stderr = Path(os.devnull).open("w")  # noqa: SIM115 (the process's stderr now)
    parser = build_parser()
    # until the command line is parsed: what an error while parsing is reported with
    args = argparse.Namespace(command=None, json="--json" in words)
    started = time.perf_counter()
    try:
        if sys.stdout is None:  # what it prints would be lost: do nothing
            raise CommandError("stdout is closed; redirect it instead (> /dev/null drops it)")
        args = parse(parser, words)  # --version prints here
        with _verbosity(parser, args):
            code = int(args.handler(args))
            flush_stdout()  # a closed pipe or a full disk is found here, not at exit
            debug(f"{args.command} took {time.perf_counter() - started:.3f} s (exit {code})")
        return code
    except IncompleteCommand as exc:
        usage_error(parser, args, str(exc))  # usage and exit 2, like argparse's own errors
    except BrokenPipeError:
        return closed_pipe()
    except REPORTED as exc:
        return report(args, exc, exit_code(exc, words))
    except KeyboardInterrupt:
        return report(args, KeyboardInterrupt("interrupted"), EXIT["stopped"])

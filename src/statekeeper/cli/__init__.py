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
 5    refused: the target thread exists, or there is nothing to resume
 6    read-only: a write to storage opened read-only or not writable
 10   interrupted: the run waits at an ``interrupt()``; answer with ``resume --answer``
 130  stopped by Ctrl-C (SIGINT)
 141  closed pipe: whoever read stdout stopped reading (``| head``); nothing is printed
====  ==========================================================================

With ``--json``, an error is one JSON object on stderr, ``{"error": {"code":
"not_found", "message": "...", "exit": 3}}``, whose ``code`` is the exit code's name in
:data:`EXIT` (see docs/cli.md).

The commands that only read (``threads``, ``history``, ``show``, ``diff``, ``export``,
``verify`` without ``--repair``, and ``copy``'s source) open the storage read-only, so
they never create a database, directory or key.

Each command lives in the module of its kind, its arguments next to its handler:
:mod:`~statekeeper.cli.runs` (run, resume, fork, migrate),
:mod:`~statekeeper.cli.inspect` (threads, history, show, diff),
:mod:`~statekeeper.cli.transfer` (copy, export, import),
:mod:`~statekeeper.cli.maintenance` (prune, verify), :mod:`~statekeeper.cli.memory` and
:mod:`~statekeeper.cli.demo`. This module only assembles them, with the global options.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from statekeeper.cli import demo, graph, inspect, maintenance, memory, runs, transfer, ui
from statekeeper.cli._common import (
    EXIT,
    REPORTED,
    Adder,
    Commands,
    IncompleteCommand,
    closed_pipe,
    exit_code,
    parse,
    report,
    usage_error,
)

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
)


def _global_options(defaults: bool) -> argparse.ArgumentParser:
    """``--db`` and ``--json``, accepted before and after the command name. Only the
    top-level parser has defaults: a command's copy must not overwrite a value given
    before the command name."""
    options = argparse.ArgumentParser(add_help=False)
    db = os.environ.get("STATEKEEPER_DB") or DEFAULT_DB
    options.add_argument(
        "--db",
        default=db if defaults else argparse.SUPPRESS,
        metavar="URL",
        help=f"storage URL (env STATEKEEPER_DB; default {DEFAULT_DB})",
    )
    options.add_argument(
        "--json",
        action="store_true",
        default=False if defaults else argparse.SUPPRESS,
        help="print JSON for scripts",
    )
    return options


def build_parser() -> argparse.ArgumentParser:
    """The ``statekeeper`` parser: the global options and every command. Building it
    imports no command's dependencies, so ``statekeeper --help`` stays fast."""
    parser = argparse.ArgumentParser(
        prog="statekeeper",
        description="Run, resume, inspect and move LangGraph threads whose state must survive.",
        epilog="Exit codes: 0 done, 1 failed, 2 bad usage, 3 not found, 4 busy, "
        "5 refused (exists / nothing to resume), 6 read-only, 10 waiting at an interrupt().",
        parents=[_global_options(defaults=True)],
    )
    commands = Commands(parser, dest="command", common=_global_options(defaults=False))
    for add in _COMMANDS:
        add(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); return the exit code.

    Whatever a user can cause ends in one message on stderr, never a traceback:
    ``statekeeper COMMAND: message``, or with ``--json`` one JSON object
    ``{"error": {"code": ..., "message": ..., "exit": ...}}`` (``code`` names the exit
    code, as in :data:`EXIT`). A closed stdout (``| head``) exits 141 quietly. Only a
    node's own exception (exit 1) is shown with the last frames of its traceback.
    """
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args = parse(parser, words)
    try:
        code = int(args.handler(args))
        sys.stdout.flush()  # a closed pipe is found here, not at the interpreter's exit
        return code
    except IncompleteCommand as exc:
        usage_error(parser, args, str(exc))  # usage and exit 2, like argparse's own errors
    except BrokenPipeError:
        return closed_pipe()
    except REPORTED as exc:
        return report(args, exc, exit_code(exc, words))
    except KeyboardInterrupt:
        return report(args, KeyboardInterrupt("interrupted"), EXIT["stopped"])

"""What every command shares: how it is added to the parser, how it opens ``--db``, how
it prints its result, and which exit code each error means.

``statekeeper --help`` builds every command's parser, so what a command runs (graphs,
transfer, memory) is imported inside its handler, never when its module is imported;
tests/test_cli_surface.py checks that.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from statekeeper import _console
from statekeeper.errors import (
    AnswerRequiredError,
    ConfigurationError,
    NoPendingInterruptError,
    NothingToResumeError,
    ReadOnlyError,
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
}

Handler = Callable[[argparse.Namespace], int]


class CommandError(Exception):
    """A problem with the command line itself, reported with exit code 2."""


class IncompleteCommand(Exception):
    """Arguments argparse accepted that still do not make a command (``prune`` with no
    thread and no ``--all``): reported like argparse's own errors, with the usage."""


class NodeFailed(Exception):
    """A node of the graph raised; the thread keeps its last completed step."""


# most specific first: the first match decides the exit code
_ERROR_EXITS: list[tuple[type[Exception], int]] = [
    (CommandError, EXIT["usage"]),
    (NodeFailed, EXIT["failed"]),
    (ThreadNotFoundError, EXIT["not_found"]),
    (StorageNotFoundError, EXIT["not_found"]),
    (ReadOnlyError, EXIT["read_only"]),
    (ThreadBusyError, EXIT["busy"]),
    (ThreadExistsError, EXIT["refused"]),
    (NothingToResumeError, EXIT["refused"]),
    (NoPendingInterruptError, EXIT["refused"]),
    (AnswerRequiredError, EXIT["interrupted"]),  # still waiting: same as a run that stopped
    (ConfigurationError, EXIT["usage"]),
    (StatekeeperError, EXIT["failed"]),
]

# the errors a command reports as one line on stderr, with the exit code of exit_code()
REPORTED: tuple[type[Exception], ...] = tuple(kind for kind, _ in _ERROR_EXITS)


def exit_code(exc: Exception) -> int:
    """The exit code that reports ``exc``: see :data:`statekeeper.cli.EXIT`."""
    return next((code for kind, code in _ERROR_EXITS if isinstance(exc, kind)), EXIT["failed"])


class Commands:
    """The subcommands of one parser. Each command gets ``--db`` and ``--json`` (also
    accepted after its name), its one line of text as help and description, and its
    handler as ``args.handler``, which :func:`statekeeper.cli.main` calls."""

    def __init__(
        self, parser: argparse.ArgumentParser, *, dest: str, common: argparse.ArgumentParser
    ) -> None:
        self._subparsers = parser.add_subparsers(dest=dest, required=True, metavar="COMMAND")
        self._common = common

    def add(self, name: str, handler: Handler, text: str) -> argparse.ArgumentParser:
        """Add the command ``name``; return its parser, for its own arguments."""
        sub = self._subparsers.add_parser(name, parents=[self._common], help=text, description=text)
        sub.set_defaults(handler=handler)
        return sub

    def group(self, parser: argparse.ArgumentParser, dest: str) -> Commands:
        """The subcommands of the command ``parser`` (``memory search``); one is required."""
        return Commands(parser, dest=dest, common=self._common)


Adder = Callable[[Commands], None]


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
    try:
        return open_checkpointer(url, **options)
    except StorageNotFoundError as exc:
        raise StorageNotFoundError(
            f"no database at {redact(url)} (nothing was created); check --db or STATEKEEPER_DB"
        ) from exc


def emit(args: argparse.Namespace, data: Any, text: Callable[[], str]) -> None:
    """Print ``data`` as JSON with ``--json``, else ``text()`` (built only when shown)."""
    print(_console.dumps(data) if args.json else text())


def threads_or_all(args: argparse.Namespace) -> None:
    """``THREAD... | --all``: raise :class:`IncompleteCommand` when neither is given."""
    if not (args.all or args.threads):
        raise IncompleteCommand("name threads, or pass --all")


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"

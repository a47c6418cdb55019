"""How a command's error is reported: :func:`describe` words it for the command line (a
missing thread or checkpoint with the command that lists them, damage and read-only
storage with what to do about them, a path with its advice); :func:`report` says it on
stderr as ``statekeeper COMMAND: message``, or with ``--json`` as one JSON object; and
:func:`parse` and :func:`usage_error` say argparse's own errors that way under ``--json``.
Which exit code an error means is :func:`statekeeper.cli._common.exit_code`.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import os
import sys
from typing import Any, NoReturn

from statekeeper import _console
from statekeeper.cli._common import (
    EXIT,
    CommandError,
    command_line,
    db_option,
    not_found,
    quoted,
)
from statekeeper.errors import (
    AmbiguousReferenceError,
    CorruptCheckpointError,
    InvalidInputError,
    ReadOnlyError,
    RefusedValuesError,
    StatekeeperError,
    ThreadNotFoundError,
)
from statekeeper.urls import redact

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
    """The message that reports ``exc`` for the command ``args``. The library's damage
    and read-only errors advise on its Python API; here they advise on the command."""
    if isinstance(exc, ThreadNotFoundError) and exc.thread_id is not None:
        url = args.source if args.command == "copy" else args.db
        return str(not_found(url, exc.thread_id, exc.checkpoint_id, exc.reason))
    if isinstance(exc, CorruptCheckpointError):
        return _damaged(exc, args.source if args.command == "copy" else args.db)
    if isinstance(exc, ReadOnlyError):
        return _read_only(exc, _written_url(args))
    if isinstance(exc, OSError) and exc.filename is not None:
        path = os.fsdecode(exc.filename)
        advice = _OS_ADVICE.get(exc.errno or 0, f"cannot be used: {exc.strerror or exc}")
        return f"{path!r} {advice}"
    return str(exc)


def _damaged(exc: CorruptCheckpointError, url: str) -> str:
    """A :class:`CorruptCheckpointError` from its ``damage``, with the commands' advice."""
    damage = exc.damage
    what = f"checkpoint {quoted(damage.checkpoint_id)}" if damage.checkpoint_id else "a record"
    if damage.thread_id is not None:
        what += f" of thread {quoted(damage.thread_id)}"
        if damage.checkpoint_ns:
            what += f" (namespace {quoted(damage.checkpoint_ns)})"
    at = f" [{damage.path}]" if damage.path else ""
    option = ("&" if "?" in url else "?") + "on_corrupt=fallback"
    return (
        f"{what} in {redact(url)} is damaged: {damage.reason}{at}; run "
        f"`{command_line('verify', *db_option(url))}` to list the damage, or add {option} to the "
        "URL to skip it"
    )


def _written_url(args: argparse.Namespace) -> str:
    """The URL the command ``args`` writes to: ``copy``'s target, a memory store, or
    ``--db``."""
    if args.command == "copy":
        return str(args.target)
    store = getattr(args, "store", None) or os.environ.get("STATEKEEPER_STORE")
    return str(store or args.db) if args.command == "memory" else str(args.db)


def _read_only(exc: ReadOnlyError, url: str) -> str:
    """A :class:`ReadOnlyError` said for the command line: what is read-only and why
    (``mode=ro`` in the URL, a server that refuses writes, or files that are not
    writable), without the library's method names."""
    from urllib.parse import parse_qs, urlsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        parts = urlsplit("")
    if "ro" in parse_qs(parts.query).get("mode", []):
        why = "its URL says mode=ro; drop mode=ro to write"
    elif parts.scheme.lower() not in ("sqlite", "file", "memory"):
        said = str(exc.__cause__ or "").strip().splitlines()
        why = "the server refuses writes" + (f" ({said[0]})" if said else "")
        why += " (a read-only replica or database); write to one that accepts writes"
    else:
        why = (
            "its files are not writable (a read-only file, directory or mount, or another "
            "user's); check their permissions"
        )
    return f"{redact(url)} is open read-only, so nothing was written: {why}"


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
        prefix = " ".join(filter(None, ("statekeeper", _command(args))))
        print(f"{prefix}: {shown}", file=sys.stderr)
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


def _name(code: int) -> str:
    return next((name for name, value in EXIT.items() if value == code), "failed")


def _command(args: argparse.Namespace) -> str:
    """The command as typed: ``memory show`` for a subcommand."""
    command = str(getattr(args, "command", None) or "")
    sub = getattr(args, f"{command}_command", None)
    return f"{command} {sub}" if sub else command

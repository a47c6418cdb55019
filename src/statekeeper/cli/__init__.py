"""The ``statekeeper`` command (also ``python -m statekeeper``): a thin shell over the API.

Every command opens the storage named by ``--db`` (env ``STATEKEEPER_DB``, default
``sqlite:///.statekeeper/state.db``), calls one public function, and prints a table, or
JSON with ``--json``. Progress bars and errors go to stderr. Exit codes (:data:`EXIT`):

====  ==========================================================================
 0    done
 1    failed: a storage error, a node raised, corrupt data found, invalid state
 2    bad usage: unknown option, malformed URL, JSON or graph reference
 3    not found: unknown thread or checkpoint
 4    busy: another run holds the thread
 5    refused: the target thread exists, or there is nothing to resume
 10   interrupted: the run waits at an ``interrupt()``; answer with ``resume --answer``
====  ==========================================================================
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from statekeeper.checkpointers import open_checkpointer
from statekeeper.cli import _console
from statekeeper.cli.memory import add_memory_commands
from statekeeper.errors import (
    AnswerRequiredError,
    ConfigurationError,
    NoPendingInterruptError,
    NothingToResumeError,
    StatekeeperError,
    ThreadBusyError,
    ThreadExistsError,
    ThreadNotFoundError,
)
from statekeeper.urls import redact

__all__ = ["EXIT", "main"]

DEFAULT_DB = "sqlite:///.statekeeper/state.db"

EXIT = {
    "ok": 0,
    "failed": 1,
    "usage": 2,
    "not_found": 3,
    "busy": 4,
    "refused": 5,
    "interrupted": 10,
}

# most specific first: the first match decides the exit code
_ERROR_EXITS: list[tuple[type[BaseException], int]] = [
    (ThreadNotFoundError, EXIT["not_found"]),
    (ThreadBusyError, EXIT["busy"]),
    (ThreadExistsError, EXIT["refused"]),
    (NothingToResumeError, EXIT["refused"]),
    (NoPendingInterruptError, EXIT["refused"]),
    (AnswerRequiredError, EXIT["interrupted"]),  # still waiting: same as a run that stopped
    (ConfigurationError, EXIT["usage"]),
    (StatekeeperError, EXIT["failed"]),
]


class CommandError(Exception):
    """A problem with the command line itself, reported with exit code 2."""


# -- helpers -----------------------------------------------------------------------------


def _open(url: str) -> Any:
    return open_checkpointer(url)


def _json_arg(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CommandError(f"{what} must be JSON ({exc}); a string is written '\"text\"'") from None


def _answer(text: str) -> Any:
    """``--answer``: JSON when it parses, else the text itself (``--answer yes``)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _emit(args: argparse.Namespace, data: Any, text: Callable[[], str]) -> None:
    print(_console.dumps(data) if args.json else text())


def _checkpoint(saver: Any, args: argparse.Namespace, checkpoint_id: str | None) -> Any:
    """The checkpoint ``checkpoint_id`` (the newest when None) of ``args.thread``."""
    configurable = {"thread_id": args.thread, "checkpoint_ns": args.ns}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    tup = saver.get_tuple({"configurable": configurable})
    if tup is None:
        raise _not_found(args, checkpoint_id)
    return tup


def _not_found(args: argparse.Namespace, checkpoint_id: str | None = None) -> ThreadNotFoundError:
    what = f"checkpoint {checkpoint_id!r} in thread" if checkpoint_id else "thread"
    return ThreadNotFoundError(
        f"no {what} {args.thread!r} in {redact(args.db)}; `statekeeper threads` lists threads"
    )


def _progress(label: str) -> tuple[_console.Progress, Callable[[int, int, int], None]]:
    bar = _console.Progress(label)

    def report(threads_done: int, threads_total: int, checkpoints: int) -> None:
        bar.update(threads_done, threads_total, f"threads, {checkpoints} checkpoints")

    return bar, report


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _counts(stats: Any) -> str:
    return (
        f"{_plural(stats.threads, 'thread')} ({_plural(stats.checkpoints, 'checkpoint')}, "
        f"{_plural(stats.writes, 'write')})"
    )


def _interrupts(tup: Any) -> list[dict[str, Any]]:
    return [
        {"id": getattr(value, "id", None), "value": getattr(value, "value", value)}
        for _, channel, values in tup.pending_writes or ()
        if channel == "__interrupt__"
        for value in (values if isinstance(values, list | tuple) else [values])
    ]


# -- commands: reading -----------------------------------------------------------------


def cmd_threads(args: argparse.Namespace) -> int:
    from statekeeper.threads import summaries

    with _open(args.db) as saver:
        rows = list(summaries(saver))[: args.limit]
    _emit(
        args,
        rows,
        lambda: (
            _console.table(
                ["thread", "status", "next", "step", "updated", "graph"],
                [
                    (r.thread_id, r.status, ", ".join(r.next), r.step, r.updated, r.graph)
                    for r in rows
                ],
            )
            if rows
            else "no threads"
        ),
    )
    return EXIT["ok"]


def cmd_history(args: argparse.Namespace) -> int:
    from statekeeper.threads import pending_nodes

    with _open(args.db) as saver:
        config = {"configurable": {"thread_id": args.thread, "checkpoint_ns": args.ns}}
        tuples = list(saver.list(config, limit=args.limit))
    if not tuples:
        raise _not_found(args)
    rows = [
        {
            "checkpoint_id": t.checkpoint["id"],
            "parent_id": (t.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
            "step": t.metadata.get("step"),
            "source": t.metadata.get("source"),
            "next": list(pending_nodes(t.checkpoint)),
            "ts": t.checkpoint["ts"],
            "metadata": t.metadata,
        }
        for t in tuples
    ]
    _emit(
        args,
        rows,
        lambda: _console.table(
            ["checkpoint", "step", "source", "next", "time"],
            [
                (r["checkpoint_id"], r["step"], r["source"], ", ".join(r["next"]), r["ts"])
                for r in rows
            ],
        ),
    )
    return EXIT["ok"]


def cmd_show(args: argparse.Namespace) -> int:
    from statekeeper.threads import pending_nodes

    with _open(args.db) as saver:
        tup = _checkpoint(saver, args, args.checkpoint)
    data = {
        "thread_id": args.thread,
        "checkpoint_id": tup.checkpoint["id"],
        "ts": tup.checkpoint["ts"],
        "metadata": tup.metadata,
        "next": list(pending_nodes(tup.checkpoint)),
        "interrupts": _interrupts(tup),
        "values": {
            key: value
            for key, value in tup.checkpoint["channel_values"].items()
            if not key.startswith(("branch:", "__"))
        },
    }
    _emit(args, data, lambda: _console.dumps(data))
    return EXIT["ok"]


def cmd_diff(args: argparse.Namespace) -> int:
    from statekeeper.threads import diff_values

    with _open(args.db) as saver:
        new = _checkpoint(saver, args, args.to)
        if args.from_:
            old = _checkpoint(saver, args, args.from_)
        elif new.parent_config is not None:
            old = saver.get_tuple(new.parent_config)
        else:
            old = None
    old_values = old.checkpoint["channel_values"] if old else {}
    changes = [
        change
        for change in diff_values(old_values, new.checkpoint["channel_values"])
        if not change.channel.startswith(("branch:", "__"))
    ]
    data = {
        "from": old.checkpoint["id"] if old else None,
        "to": new.checkpoint["id"],
        "changes": changes,
    }

    def text() -> str:
        lines = [f"{data['from'] or '(nothing)'} -> {data['to']}"]
        for change in changes:
            mark = {"added": "+", "removed": "-", "changed": "~", "appended": "+"}[change.kind]
            shown = change.old if change.kind == "removed" else change.new
            lines.append(
                f"{mark} {change.channel} ({change.kind}): {_console.dumps(shown, indent=None)}"
            )
        return "\n".join(lines if changes else [*lines, "no changes"])

    _emit(args, data, text)
    return EXIT["ok"]


# -- commands: running -----------------------------------------------------------------


def _run_result(args: argparse.Namespace, result: Any) -> int:
    def text() -> str:
        lines = [
            f"thread      {result.thread_id}",
            f"status      {result.status}",
            f"checkpoint  {result.checkpoint_id}",
        ]
        if result.next:
            lines.append(f"next        {', '.join(result.next)}")
        for pending in result.interrupts:
            value = getattr(pending, "value", pending)
            lines.append(f"waiting on  {_console.dumps(value, indent=None)}")
        if result.status == "interrupted":
            lines.append(f"answer with: statekeeper resume {result.thread_id} --answer JSON")
        return "\n".join(lines)

    _emit(args, result, text)
    return EXIT["interrupted"] if result.status == "interrupted" else EXIT["ok"]


class NodeFailed(Exception):
    """A node of the graph raised; the thread keeps its last completed step."""


@contextlib.contextmanager
def _node_failure(args: argparse.Namespace) -> Iterator[None]:
    try:
        yield
    except (StatekeeperError, CommandError):
        raise
    except Exception as exc:
        thread = getattr(args, "thread", None) or "THREAD"
        raise NodeFailed(
            f"the graph raised {type(exc).__name__}: {exc}\n{_traceback(exc)}"
            f"the thread keeps its last completed step; fix the cause, then run: "
            f"statekeeper resume {thread}"
        ) from exc


def _traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc, limit=-3))


def cmd_run(args: argparse.Namespace) -> int:
    from statekeeper.graphs import Runner

    data = _json_arg(args.input, "--input") if args.input is not None else {}
    with _open(args.db) as saver, _node_failure(args):
        result = Runner(saver).run(args.graph, data, thread_id=args.thread)
    return _run_result(args, result)


def cmd_resume(args: argparse.Namespace) -> int:
    from statekeeper.graphs import Runner

    with _open(args.db) as saver, _node_failure(args):
        runner = Runner(saver)
        try:
            if args.answer is None:
                result = runner.resume(args.thread, graph_ref=args.graph)
            else:
                answer = _answer(args.answer)
                result = runner.resume(args.thread, answer=answer, graph_ref=args.graph)
        except AnswerRequiredError as exc:
            raise AnswerRequiredError(
                f"{exc}: statekeeper resume {args.thread} --answer VALUE",
                thread_id=exc.thread_id,
                interrupts=exc.interrupts,
            ) from None
    return _run_result(args, result)


def cmd_fork(args: argparse.Namespace) -> int:
    from statekeeper.graphs import Runner

    with _open(args.db) as saver:
        result = Runner(saver).fork(args.thread, args.checkpoint, to_thread=args.to)
    _emit(
        args,
        result,
        lambda: (
            f"forked {result.source_thread_id} at {result.source_checkpoint_id}\n"
            f"into   {result.thread_id} at {result.checkpoint_id}\n"
            f"next   {', '.join(result.next) or '-'}\n"
            f"continue with: statekeeper resume {result.thread_id}"
        ),
    )
    return EXIT["ok"]


def cmd_migrate(args: argparse.Namespace) -> int:
    from statekeeper.graphs import Runner
    from statekeeper.threads import list_threads

    with _open(args.db) as saver:
        thread_ids = list_threads(saver) if args.all else args.threads
        runner = Runner(saver)
        results = {
            thread_id: runner.migrate(thread_id, graph_ref=args.graph) for thread_id in thread_ids
        }
    _emit(
        args,
        results,
        lambda: _console.table(
            ["thread", "schema version"],
            [
                (thread_id, f"{r.from_version} -> {r.to_version}" if r else "up to date")
                for thread_id, r in results.items()
            ],
        ),
    )
    return EXIT["ok"]


# -- commands: storage -----------------------------------------------------------------


def cmd_copy(args: argparse.Namespace) -> int:
    from statekeeper.transfer import copy_threads

    bar, report = _progress("copy")
    with _open(args.source) as source, _open(args.target) as target:
        try:
            stats = copy_threads(source, target, args.thread or None, progress=report)
        finally:
            bar.done()
    _emit(
        args,
        stats,
        lambda: f"copied {_counts(stats)} from {redact(args.source)} to {redact(args.target)}",
    )
    return EXIT["ok"]


def cmd_export(args: argparse.Namespace) -> int:
    from statekeeper.transfer import export_threads

    bar, report = _progress("export")
    with _open(args.db) as saver, _output(args.output) as out:
        try:
            stats = export_threads(saver, out, args.thread or None, progress=report)
        finally:
            bar.done()
    message = f"exported {_counts(stats)}"
    print(_console.dumps(stats) if args.json else message, file=sys.stderr)
    return EXIT["ok"]


def cmd_import(args: argparse.Namespace) -> int:
    from statekeeper.transfer import import_threads

    bar, report = _progress("import")
    with _open(args.db) as saver, _input(args.file) as src:
        try:
            stats = import_threads(saver, src, progress=report)
        finally:
            bar.done()
    _emit(
        args,
        stats,
        lambda: f"imported {_counts(stats)} into {redact(args.db)}",
    )
    return EXIT["ok"]


def cmd_prune(args: argparse.Namespace) -> int:
    from statekeeper.threads import list_threads

    with _open(args.db) as saver:
        thread_ids = list_threads(saver) if args.all else args.threads
        saver.prune(thread_ids, strategy=args.strategy)
    _emit(
        args,
        {"threads": thread_ids, "strategy": args.strategy},
        lambda: f"pruned {_plural(len(thread_ids), 'thread')} ({args.strategy})",
    )
    return EXIT["ok"]


def cmd_verify(args: argparse.Namespace) -> int:
    from statekeeper.checkpointers import FileCheckpointer

    with _open(args.db) as saver:
        problems: list[dict[str, Any]] = []
        if isinstance(saver, FileCheckpointer):  # checks every stored file, not just reads
            problems = _console.jsonable(saver.verify(quarantine=args.quarantine))
        elif args.quarantine:
            raise CommandError("--quarantine applies to file:// storage only")
        threads = checked = 0
        if not problems or args.quarantine:  # quarantine leaves only loadable checkpoints
            threads, checked = _read_everything(saver, problems)
    data = {"threads": threads, "checkpoints": checked, "problems": problems}

    def text() -> str:
        summary = f"{threads} threads, {checked} checkpoints: "
        if not problems:
            return summary + "all intact"
        rows = [
            (p.get("thread_id"), p.get("checkpoint_id"), p.get("path"), p.get("reason"))
            for p in problems
        ]
        table = _console.table(["thread", "checkpoint", "file", "reason"], rows)
        return f"{summary}{len(problems)} problems\n{table}"

    _emit(args, data, text)
    return EXIT["failed"] if problems else EXIT["ok"]


def _read_everything(saver: Any, problems: list[dict[str, Any]]) -> tuple[int, int]:
    """Load every checkpoint of every thread (which checks every checksum); add what
    fails to ``problems``; return how many threads and checkpoints were read."""
    from statekeeper.threads import list_threads

    try:
        thread_ids = list_threads(saver)
    except StatekeeperError as exc:
        problems.append({"reason": f"cannot list the threads: {exc}"})
        return 0, 0
    bar = _console.Progress("verify")
    checked = 0
    for done, thread_id in enumerate(thread_ids, 1):
        try:
            checked += sum(1 for _ in saver.list({"configurable": {"thread_id": thread_id}}))
        except StatekeeperError as exc:
            problems.append({"thread_id": thread_id, "reason": str(exc)})
        bar.update(done, len(thread_ids), f"threads, {checked} checkpoints")
    bar.done()
    return len(thread_ids), checked


def cmd_demo(args: argparse.Namespace) -> int:
    from statekeeper.cli.demo import run_demo

    return run_demo(workdir=Path(args.workdir), graph_ref=args.graph, redis_url=args.redis)


# -- files -------------------------------------------------------------------------------


def _output(path: str) -> AbstractContextManager[Any]:
    if path == "-":
        return _Borrowed(sys.stdout)
    return Path(path).open("w", encoding="utf-8", newline="\n")


def _input(path: str) -> AbstractContextManager[Any]:
    if path == "-":
        return _Borrowed(sys.stdin)
    try:
        return Path(path).open(encoding="utf-8", newline="\n")
    except OSError as exc:
        raise CommandError(f"cannot read {path!r}: {exc.strerror}") from None


class _Borrowed(AbstractContextManager[Any]):
    """A stream this command did not open and must not close."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def __enter__(self) -> Any:
        return self.stream

    def __exit__(self, *exc: object) -> None:
        self.stream.flush() if hasattr(self.stream, "flush") else None


# -- parser ------------------------------------------------------------------------------


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
    common = _global_options(defaults=False)
    parser = argparse.ArgumentParser(
        prog="statekeeper",
        description="Run, resume, inspect and move LangGraph threads whose state must survive.",
        epilog="Exit codes: 0 done, 1 failed, 2 bad usage, 3 not found, 4 busy, "
        "5 refused (exists / nothing to resume), 10 waiting at an interrupt().",
        parents=[_global_options(defaults=True)],
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: Callable[[argparse.Namespace], int], text: str) -> Any:
        sub = commands.add_parser(name, parents=[common], help=text, description=text)
        sub.set_defaults(handler=handler)
        return sub

    ns_help = "checkpoint namespace (subgraphs); default: the root graph"

    sub = command("run", cmd_run, "start a graph on a new thread")
    sub.add_argument("graph", help='the graph to run, as "package.module:attr"')
    sub.add_argument("--input", metavar="JSON", help="the graph's input (a JSON object)")
    sub.add_argument("--thread", metavar="ID", help="thread id (default: a new random id)")

    sub = command("resume", cmd_resume, "continue a thread from its last completed step")
    sub.add_argument("thread", help="thread id")
    sub.add_argument(
        "--answer", metavar="VALUE", help="answer to a pending interrupt() (JSON, else text)"
    )
    sub.add_argument("--graph", metavar="REF", help="graph to use instead of the recorded one")

    sub = command("threads", cmd_threads, "list threads, most recently written first")
    sub.add_argument("--limit", type=int, default=None, metavar="N", help="show at most N")

    sub = command("history", cmd_history, "list a thread's checkpoints, newest first")
    sub.add_argument("thread", help="thread id")
    sub.add_argument("--limit", type=int, default=None, metavar="N", help="show at most N")
    sub.add_argument("--ns", default="", help=ns_help)

    sub = command("show", cmd_show, "show the state stored at a checkpoint")
    sub.add_argument("thread", help="thread id")
    sub.add_argument("--checkpoint", metavar="ID", help="checkpoint id (default: the newest)")
    sub.add_argument("--ns", default="", help=ns_help)

    sub = command("diff", cmd_diff, "show what changed between two checkpoints")
    sub.add_argument("thread", help="thread id")
    sub.add_argument(
        "from_", nargs="?", metavar="FROM", help="older checkpoint (default: TO's parent)"
    )
    sub.add_argument("to", nargs="?", metavar="TO", help="newer checkpoint (default: the newest)")
    sub.add_argument("--ns", default="", help=ns_help)

    sub = command("fork", cmd_fork, "branch a thread from an earlier checkpoint")
    sub.add_argument("thread", help="thread id")
    sub.add_argument("checkpoint", help="the checkpoint to branch from")
    sub.add_argument("--to", metavar="THREAD", help="new thread to fork into (default: same)")

    sub = command("copy", cmd_copy, "copy threads from one storage URL to another")
    sub.add_argument("source", metavar="SRC_URL")
    sub.add_argument("target", metavar="DST_URL")
    sub.add_argument(
        "--thread",
        action="append",
        metavar="ID",
        help="copy this thread (repeatable; default: all)",
    )

    sub = command("export", cmd_export, "write threads to a JSON Lines dump")
    sub.add_argument(
        "--thread",
        action="append",
        metavar="ID",
        help="export this thread (repeatable; default: all)",
    )
    sub.add_argument(
        "-o", "--output", default="-", metavar="FILE", help="dump file (default: stdout)"
    )

    sub = command("import", cmd_import, "load threads from a JSON Lines dump")
    sub.add_argument("file", metavar="FILE", help="dump file ('-' for stdin)")

    sub = command("prune", cmd_prune, "shrink threads to their newest checkpoint, or delete them")
    sub.add_argument("threads", nargs="*", metavar="THREAD")
    sub.add_argument("--all", action="store_true", help="every thread")
    sub.add_argument("--strategy", choices=["keep_latest", "delete"], default="keep_latest")

    sub = command("verify", cmd_verify, "check that every stored checkpoint loads intact")
    sub.add_argument(
        "--quarantine", action="store_true", help="file:// only: move damaged files aside"
    )

    sub = command("migrate", cmd_migrate, "upgrade threads to their graph's state schema")
    sub.add_argument("threads", nargs="*", metavar="THREAD")
    sub.add_argument("--all", action="store_true", help="every thread")
    sub.add_argument("--graph", metavar="REF", help="graph to use instead of the recorded one")

    memory = command("memory", _usage_of_group, "memory notes: search, show, stats, export, eval")
    add_memory_commands(memory, common)

    sub = command("demo", cmd_demo, "crash, resume, approve and move an example agent run")
    sub.add_argument("--workdir", default=".statekeeper/demo", help="where the demo stores state")
    sub.add_argument("--graph", default="examples.approval_agent:graph", help="the agent graph")
    sub.add_argument("--redis", metavar="URL", help="also copy to this Redis (default: try local)")
    return parser


def _usage_of_group(args: argparse.Namespace) -> int:
    raise CommandError("name a subcommand; see --help")  # argparse requires one first


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    for name in ("prune", "migrate"):
        if args.command == name and not (args.all or args.threads):
            parser.error(f"{name}: name threads, or pass --all")
    try:
        return int(args.handler(args))
    except CommandError as exc:
        print(f"statekeeper {args.command}: {exc}", file=sys.stderr)
        return EXIT["usage"]
    except NodeFailed as exc:
        print(f"statekeeper {args.command}: {exc}", file=sys.stderr)
        return EXIT["failed"]
    except StatekeeperError as exc:
        print(f"statekeeper {args.command}: {exc}", file=sys.stderr)
        return next(code for kind, code in _ERROR_EXITS if isinstance(exc, kind))
    except KeyboardInterrupt:
        print(f"statekeeper {args.command}: interrupted", file=sys.stderr)
        return 130

"""Commands that run a graph or change where a thread stands: ``run``, ``resume``,
``fork`` and ``migrate``, each with its arguments next to its handler.

``run`` and ``resume`` print the result of the run and exit 10 when it waits at an
``interrupt()``; a node that raises exits 1 with its traceback, and the thread keeps its
last completed step.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import traceback
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from statekeeper import _console
from statekeeper.cli._common import (
    EXIT,
    REF_HELP,
    CommandError,
    Commands,
    NodeFailed,
    command_line,
    emit,
    open_saver,
    progress,
    resolve,
    stdin,
    threads_or_all,
)
from statekeeper.errors import AnswerRequiredError, StatekeeperError

__all__ = ["add_fork", "add_migrate", "add_resume", "add_run"]


def add_run(commands: Commands) -> None:
    sub = commands.add(
        "run",
        cmd_run,
        "start a graph on a new thread",
        examples=(
            "statekeeper run examples.approval_agent:graph --thread t1 \\",
            '    --input \'{"messages": [{"role": "user", "content": "Where is order 1042?"}]}\'',
            "statekeeper run myapp.agents:graph --input @input.json",
            'echo \'{"question": "..."}\' | statekeeper run myapp.agents:graph --input -',
        ),
    )
    sub.add_argument("graph", help='the graph to run, as "package.module:attr"')
    sub.add_argument(
        "--input",
        metavar="JSON",
        help="the graph's input: a JSON object, @FILE to read it from a file, - for stdin",
    )
    sub.add_argument("--thread", metavar="ID", help="thread id (default: a new random id)")


def cmd_run(args: argparse.Namespace) -> int:
    """Start ``args.graph`` on a new thread with the JSON ``--input``; the checkpoints
    record the graph and its state schema version.

    The input is checked against the graph's input schema before the storage is even
    opened: a bad input exits 2 and creates nothing (no database, no thread, no claim).
    """
    from statekeeper.graphs import Runner, check_input, load_graph

    data = _input(args.input) if args.input is not None else {}
    thread = args.thread if args.thread is not None else str(uuid.uuid4())
    check_input(load_graph(args.graph), data, graph_ref=args.graph)
    with open_saver(args.db) as saver, _node_failure(thread):
        result = Runner(saver).run(args.graph, data, thread_id=thread)
    return _run_result(args, result)


_ANSWER_HELP = (
    "the answer to the interrupt(): JSON, else taken as text; @FILE reads it from a file, "
    "- from stdin"
)


def add_resume(commands: Commands) -> None:
    sub = commands.add(
        "resume",
        cmd_resume,
        "continue a thread from its last completed step",
        examples=(
            "statekeeper resume t1                     # after a crash, a kill or an exception",
            "statekeeper resume t1 --answer yes        # answer a pending interrupt()",
            "statekeeper resume t1 --answer '{\"approved\": true}' --graph myapp.agents:graph",
        ),
    )
    sub.add_argument("thread", help="thread id")
    sub.add_argument("--answer", metavar="VALUE", help=_ANSWER_HELP)
    sub.add_argument(
        "--from",
        dest="from_ref",
        metavar="CHECKPOINT",
        help=f"fork at this checkpoint first, then run from there: {REF_HELP}",
    )
    sub.add_argument("--graph", metavar="REF", help="graph to use instead of the recorded one")


def cmd_resume(args: argparse.Namespace) -> int:
    """Continue ``args.thread`` from its last completed step, answering its pending
    ``interrupt()`` with ``--answer``; a thread that waits for an answer and got none
    exits 10 with the command that answers it. With ``--from REF``, the thread is forked
    at that checkpoint first (as ``fork THREAD REF``) and runs from there, ``--answer``
    answering the ``interrupt()`` that checkpoint's step asked."""
    from statekeeper.graphs import NO_ANSWER, Runner

    answer = _answer(args.answer) if args.answer is not None else NO_ANSWER
    with open_saver(args.db) as saver:
        runner = Runner(saver)
        if args.from_ref is not None:
            source = resolve(saver, args.thread, args.from_ref).checkpoint["id"]
            with _node_failure(args.thread):
                result = runner.fork_and_resume(
                    args.thread, source, answer=answer, graph_ref=args.graph
                )
            return _run_result(args, result)
        with _node_failure(args.thread):
            result = _resume(runner, args, answer)
    return _run_result(args, result)


def _resume(runner: Any, args: argparse.Namespace, answer: Any) -> Any:
    """``runner.resume``; a thread waiting for an answer is told how to give one."""
    try:
        return runner.resume(args.thread, answer=answer, graph_ref=args.graph)
    except AnswerRequiredError as exc:
        raise AnswerRequiredError(
            f"{exc}: {command_line('resume', args.thread, '--answer')} VALUE",
            thread_id=exc.thread_id,
            interrupts=exc.interrupts,
        ) from None


def add_fork(commands: Commands) -> None:
    sub = commands.add(
        "fork",
        cmd_fork,
        "branch a thread from an earlier checkpoint",
        examples=(
            "statekeeper fork t1 CHECKPOINT_ID --to t1-retry",
            "statekeeper resume t1-retry",
        ),
    )
    sub.add_argument("thread", help="thread id")
    sub.add_argument(
        "checkpoint", metavar="CHECKPOINT", help=f"the checkpoint to branch from: {REF_HELP}"
    )
    sub.add_argument("--to", metavar="THREAD", help="new thread to fork into (default: same)")
    sub.add_argument(
        "--answer",
        metavar="VALUE",
        help="answer the interrupt() the checkpoint's step asked, and run on: "
        + _ANSWER_HELP.removeprefix("the answer to the interrupt(): "),
    )


def cmd_fork(args: argparse.Namespace) -> int:
    """Branch ``args.thread`` at the checkpoint ``REF`` names into ``--to`` (default: the
    same thread); nothing runs until ``resume``. With ``--answer``, the fork runs at
    once, the ``interrupt()`` its step asks answered (exit 10 if it stops at another);
    refused with exit 5, nothing written, when that step asked none."""
    from statekeeper.graphs import Runner

    answer = _answer(args.answer) if args.answer is not None else None
    with open_saver(args.db) as saver:
        source = resolve(saver, args.thread, args.checkpoint).checkpoint["id"]
        runner = Runner(saver)
        if args.answer is not None:
            with _node_failure(args.to if args.to is not None else args.thread):
                run = runner.fork_and_resume(args.thread, source, answer=answer, to_thread=args.to)
            return _run_result(args, run)
        result = runner.fork(args.thread, source, to_thread=args.to)
    emit(
        args,
        result,
        lambda: (
            f"forked {_console.escape(result.source_thread_id)} at {result.source_checkpoint_id}\n"
            f"into   {_console.escape(result.thread_id)} at {result.checkpoint_id}\n"
            f"next   {_console.escape(', '.join(result.next)) or '-'}\n"
            f"continue with: {command_line('resume', result.thread_id)}"
        ),
    )
    return EXIT["ok"]


def add_migrate(commands: Commands) -> None:
    sub = commands.add(
        "migrate",
        cmd_migrate,
        "upgrade threads to their graph's state schema",
        examples=(
            "statekeeper migrate t1 t2",
            "statekeeper migrate --all --graph myapp.agents:graph",
        ),
    )
    sub.add_argument("threads", nargs="*", metavar="THREAD")
    sub.add_argument("--all", action="store_true", help="every thread")
    sub.add_argument("--graph", metavar="REF", help="graph to use instead of the recorded one")


def cmd_migrate(args: argparse.Namespace) -> int:
    """Upgrade the stored state of the named threads (or ``--all``) to their graph's
    current schema version, without running anything."""
    threads_or_all(args)  # before anything is imported or opened, as argparse would
    from statekeeper.graphs import Runner
    from statekeeper.threads import list_threads

    with open_saver(args.db) as saver:
        thread_ids = list_threads(saver) if args.all else args.threads
        runner = Runner(saver)
        results = {}
        bar = progress("migrate")
        try:
            for done, thread_id in enumerate(thread_ids, 1):
                results[thread_id] = runner.migrate(thread_id, graph_ref=args.graph)
                bar.update(done, len(thread_ids), "threads")
        finally:
            bar.done()
    emit(
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


# -- shared by run and resume ------------------------------------------------------------


def _run_result(args: argparse.Namespace, result: Any) -> int:
    def text() -> str:
        lines = [
            f"thread      {_console.escape(result.thread_id)}",
            f"status      {result.status}",
            f"checkpoint  {result.checkpoint_id}",
        ]
        if result.next:
            lines.append(f"next        {_console.escape(', '.join(result.next))}")
        for pending in result.interrupts:
            value = getattr(pending, "value", pending)
            lines.append(f"waiting on  {_console.dumps(value, indent=None)}")
        if result.status == "interrupted":
            resume = command_line("resume", result.thread_id, "--answer")
            lines.append(f"answer with: {resume} JSON")
        return "\n".join(lines)

    emit(args, result, text)
    return EXIT["interrupted"] if result.status == "interrupted" else EXIT["ok"]


@contextlib.contextmanager
def _node_failure(thread: str) -> Iterator[None]:
    """Report what a node raised as :class:`NodeFailed` (exit 1), with how to go on."""
    try:
        yield
    except (StatekeeperError, CommandError):
        raise
    except Exception as exc:
        raise NodeFailed(
            f"the graph raised {type(exc).__name__}: {exc}\n{_traceback(exc)}"
            f"the thread keeps its last completed step; fix the cause, then run: "
            f"{command_line('resume', thread)}"
        ) from exc


def _traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc, limit=-3))


def _input(given: str) -> Any:
    """``--input``: inline JSON, ``@FILE`` (a file holding it) or ``-`` (stdin)."""
    text, where = _read_arg(given, "--input")
    try:
        return _loads(text, where)
    except ValueError as exc:
        raise CommandError(
            f'{where} must be JSON ({exc}); an object is written \'{{"key": "text"}}\''
        ) from None


def _read_arg(given: str, option: str) -> tuple[str, str]:
    """The text an option's value stands for: itself, the content of ``@FILE``, or
    stdin for ``-``; and how to name where it came from in a message. Text that is not
    UTF-8, a closed stdin and ``@`` with no file are bad usage (exit 2)."""
    if given == "-":
        where = f"{option} (from stdin)"
        try:
            return stdin().read(), where
        except UnicodeDecodeError:
            raise CommandError(f"{where} is not UTF-8 text") from None
    if given.startswith("@"):
        path = given[1:]
        if not path:
            raise CommandError(f"{option} @: no file named; write @FILE, or - for stdin")
        try:
            text = Path(path).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise CommandError(f"{option} {given}: {path!r} is not UTF-8 text") from None
        return text, f"{option} (from {path!r})"
    return given, option


def _loads(text: str, where: str) -> Any:
    """``text`` as JSON, strictly: NaN and Infinity, which Python's json reads, are not
    JSON (RFC 8259), so they raise ``ValueError`` as any other text that is not JSON.

    JSON that no run could take is bad usage (:class:`CommandError`, exit 2): arrays or
    objects nested too deeply to decode (refused, as ``import`` refuses such a dump
    line, not left to crash), and a lone surrogate (a ``\\ud800`` escape outside a
    pair), which no storage keeps as given.
    """
    try:
        value = json.loads(text, parse_constant=_not_json)
    except RecursionError as exc:  # json's decoder recurses once per nested array or object
        raise CommandError(f"{where} nests arrays or objects too deeply to read ({exc})") from None
    return _unicode(value, where)


def _unicode(value: Any, where: str) -> Any:
    """``value`` if every text in it (keys too) is valid unicode; walked without
    recursion, however deep it is."""
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            todo += [*item, *item.values()]
        elif isinstance(item, list):
            todo += item
        elif isinstance(item, str) and not item.isascii():
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise CommandError(
                    f"{where} holds a lone surrogate ({ascii(item[exc.start])[1:-1]}): a \\u "
                    "escape without the other half of its pair, or bytes that are not UTF-8; "
                    "write the character itself"
                ) from None
    return value


def _not_json(constant: str) -> NoReturn:
    raise ValueError(f"{constant} is not a JSON number; write a number or null")


def _answer(given: str) -> Any:
    """``--answer``: JSON when it parses (strictly: no NaN; as :func:`_loads`), else the
    text itself (``--answer yes``); ``@FILE`` and ``-`` read it from a file or stdin
    first (a text answer read so loses its final newline)."""
    text, where = _read_arg(given, "--answer")
    try:
        return _loads(text, where)
    except ValueError:
        read = given == "-" or given.startswith("@")
        return _unicode(text.removesuffix("\n") if read else text, where)

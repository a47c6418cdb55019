"""Commands that look after stored threads: ``prune`` and ``verify``, each with its
arguments next to its handler."""

from __future__ import annotations

import argparse
from typing import Any

from statekeeper import _console
from statekeeper.cli._common import (
    EXIT,
    CommandError,
    Commands,
    emit,
    open_saver,
    plural,
    threads_or_all,
)
from statekeeper.errors import StatekeeperError

__all__ = ["add_prune", "add_verify"]


def add_prune(commands: Commands) -> None:
    sub = commands.add(
        "prune", cmd_prune, "shrink threads to their newest checkpoint, or delete them"
    )
    sub.add_argument("threads", nargs="*", metavar="THREAD")
    sub.add_argument("--all", action="store_true", help="every thread")
    sub.add_argument("--strategy", choices=["keep_latest", "delete"], default="keep_latest")


def cmd_prune(args: argparse.Namespace) -> int:
    """Keep only the newest checkpoint of each named thread (or ``--all``), or with
    ``--strategy delete`` delete the threads."""
    threads_or_all(args)  # before anything is imported or opened, as argparse would
    from statekeeper.threads import list_threads

    with open_saver(args.db) as saver:
        thread_ids = list_threads(saver) if args.all else args.threads
        saver.prune(thread_ids, strategy=args.strategy)
    emit(
        args,
        {"threads": thread_ids, "strategy": args.strategy},
        lambda: f"pruned {plural(len(thread_ids), 'thread')} ({args.strategy})",
    )
    return EXIT["ok"]


def add_verify(commands: Commands) -> None:
    sub = commands.add("verify", cmd_verify, "check that every stored checkpoint loads intact")
    sub.add_argument(
        "--quarantine", action="store_true", help="file:// only: move damaged files aside"
    )


def cmd_verify(args: argparse.Namespace) -> int:
    """Load every checkpoint of every thread, checking every checksum; on ``file://``
    storage first check every stored file and, with ``--quarantine``, move damaged ones
    aside. Exits 1 when anything is damaged (also when it was just moved aside)."""
    from statekeeper.checkpointers import FileCheckpointer

    with open_saver(args.db) as saver:
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

    emit(args, data, text)
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

"""Commands that look after stored threads: ``prune`` and ``verify``, each with its
arguments next to its handler.

``verify`` opens the storage read-only (it works on a read-only mount and creates
nothing) unless ``--repair`` or ``--quarantine`` is given.
"""

from __future__ import annotations

import argparse
from typing import Any

from statekeeper import _console
from statekeeper.cli._common import (
    EXIT,
    CommandError,
    Commands,
    emit,
    not_found,
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
    ``--strategy delete`` delete the threads; a named thread that does not exist exits
    3 before anything is pruned."""
    threads_or_all(args)  # before anything is imported or opened, as argparse would
    from statekeeper.threads import list_threads

    with open_saver(args.db) as saver:
        thread_ids = list_threads(saver) if args.all else args.threads
        for thread_id in thread_ids:  # all of them exist, or nothing is pruned
            if (
                next(iter(saver.list({"configurable": {"thread_id": thread_id}}, limit=1)), None)
                is None
            ):
                raise not_found(args.db, thread_id)
        saver.prune(thread_ids, strategy=args.strategy)
    emit(
        args,
        {"threads": thread_ids, "strategy": args.strategy},
        lambda: f"pruned {plural(len(thread_ids), 'thread')} ({args.strategy})",
    )
    return EXIT["ok"]


def add_verify(commands: Commands) -> None:
    sub = commands.add(
        "verify", cmd_verify, "check every stored record against its checksum; exit 1 if damaged"
    )
    sub.add_argument(
        "--repair",
        action="store_true",
        help="rebuild what intact records allow (indexes, missing checksums); opens read-write",
    )
    sub.add_argument(
        "--quarantine", action="store_true", help="file:// only: move damaged files aside"
    )


def cmd_verify(args: argparse.Namespace) -> int:
    """Check every stored record of every thread (``saver.verify()``), then load every
    checkpoint; exit 1 when anything is damaged (also when it was just repaired or moved
    aside). Opens the storage read-only unless ``--repair`` or ``--quarantine`` asks to
    change it."""
    changes = args.repair or args.quarantine
    with open_saver(args.db, read_only=not changes) as saver:
        problems = _verified(saver, args)
        threads = checked = 0
        if not problems or changes:  # repaired or quarantined: see what loads now
            threads, checked = _read_everything(saver, problems)
    data = {"threads": threads, "checkpoints": checked, "problems": problems}

    def text() -> str:
        summary = f"{threads} threads, {checked} checkpoints: "
        if not problems:
            return summary + "all intact"
        rows = [
            (
                p.get("thread_id"),
                p.get("checkpoint_id"),
                p.get("record"),
                p.get("path"),
                p.get("reason"),
            )
            for p in problems
        ]
        table = _console.table(["thread", "checkpoint", "record", "where", "reason"], rows)
        return f"{summary}{len(problems)} problems\n{table}"

    emit(args, data, text)
    return EXIT["failed"] if problems else EXIT["ok"]


def _verified(saver: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    """What ``saver.verify()`` finds damaged, as JSON data. A backend that cannot check
    its records yet (``NotImplementedError``) is checked by loading everything only."""
    from statekeeper.checkpointers import FileCheckpointer

    options: dict[str, Any] = {"repair": args.repair}
    if args.quarantine:
        if not isinstance(saver, FileCheckpointer):
            raise CommandError("--quarantine applies to file:// storage only")
        options["quarantine"] = True
    try:
        damage = saver.verify(**options)
    except NotImplementedError:
        if args.repair:
            raise CommandError(f"--repair: {type(saver).__name__} cannot repair yet") from None
        return []
    return [
        {key: value for key, value in _console.jsonable(d).items() if value is not None}
        for d in damage
    ]


def _read_everything(saver: Any, problems: list[dict[str, Any]]) -> tuple[int, int]:
    """Load every checkpoint of every thread (which checks every checksum); add what
    fails to ``problems``; return how many threads and checkpoints were read. The threads
    are found by a scan of every checkpoint, not the thread index: the index is one of
    the records checked."""
    from statekeeper.checkpointers.heads import scan_heads

    try:
        thread_ids = [head.thread_id for head in scan_heads(saver)]
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

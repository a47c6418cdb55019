"""Commands that look after stored threads: ``prune`` and ``verify``, each with its
arguments next to its handler.

``prune`` is the one command that deletes what it was not asked to write: it asks
before it deletes (``--yes`` answers; a script without a terminal must pass it), and
``--dry-run`` shows what it would delete. ``verify --repair`` only rebuilds and
``--quarantine`` only moves damaged files aside, so they do not ask.

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
    answerable,
    confirm,
    emit,
    not_found,
    open_saver,
    plural,
    progress,
    threads_or_all,
)
from statekeeper.errors import StatekeeperError
from statekeeper.urls import redact

__all__ = ["add_prune", "add_verify"]


def add_prune(commands: Commands) -> None:
    sub = commands.add(
        "prune",
        cmd_prune,
        "shrink threads to their newest checkpoint, or delete them",
        examples=(
            "statekeeper prune --all --dry-run         # what would go; deletes nothing",
            "statekeeper prune t1 t2                   # asks first, on a terminal",
            "statekeeper prune --all --strategy delete --yes   # in a script: no question",
        ),
    )
    sub.add_argument("threads", nargs="*", metavar="THREAD")
    sub.add_argument("--all", action="store_true", help="every thread")
    sub.add_argument("--strategy", choices=["keep_latest", "delete"], default="keep_latest")
    sub.add_argument(
        "--dry-run",
        action="store_true",
        help="print what would be deleted (threads, checkpoints) and delete nothing",
    )
    sub.add_argument(
        "-y", "--yes", action="store_true", help="do not ask for confirmation (needed in scripts)"
    )


def cmd_prune(args: argparse.Namespace) -> int:
    """Keep only the newest checkpoint of each namespace of each named thread (or
    ``--all``), or with ``--strategy delete`` delete the threads.

    A named thread that does not exist exits 3 before anything is pruned. ``--dry-run``
    opens the storage read-only and prints what would be deleted. Otherwise the command
    asks first (``--yes`` answers for it; without a terminal on stdin it must be given,
    else exit 2), and only then deletes.
    """
    threads_or_all(args)  # before anything is imported or opened, as argparse would
    if not args.dry_run:
        answerable(args, f"prune --strategy {args.strategy}")
    with open_saver(args.db, read_only=args.dry_run) as saver:
        plan = _prune_plan(saver, args)
        if not args.dry_run and plan["threads"]:
            confirm(args, f"{_plan_text(plan, args.strategy)} in {redact(args.db)}?")
            saver.prune([t["thread_id"] for t in plan["threads"]], strategy=args.strategy)
    thread_ids = [t["thread_id"] for t in plan["threads"]]
    if args.dry_run:
        emit(args, {**plan, "dry_run": True}, lambda: _dry_run_text(plan, args.strategy))
        return EXIT["ok"]
    emit(
        args,
        {"threads": thread_ids, "strategy": args.strategy},
        lambda: f"pruned {plural(len(thread_ids), 'thread')} ({args.strategy})",
    )
    return EXIT["ok"]


def _prune_plan(saver: Any, args: argparse.Namespace) -> dict[str, Any]:
    """What pruning would delete, thread by thread: how many checkpoints each holds and
    how many would go (``keep_latest`` keeps the newest of each namespace, so at most
    that many go: delta channels may need some ancestors kept). A named thread that
    does not exist raises the not-found error."""
    from statekeeper._storage.serde import skeleton_reader
    from statekeeper.threads import list_threads

    thread_ids = list_threads(saver) if args.all else list(dict.fromkeys(args.threads))
    threads = []
    counted = skeleton_reader(saver)  # what is counted needs no value built
    for thread_id in thread_ids:
        namespaces: dict[str, int] = {}
        for tup in counted.list({"configurable": {"thread_id": thread_id}}):
            ns = tup.config["configurable"].get("checkpoint_ns", "")
            namespaces[ns] = namespaces.get(ns, 0) + 1
        if not namespaces:
            raise not_found(args.db, thread_id)  # all of them exist, or nothing is pruned
        held = sum(namespaces.values())
        deleted = held if args.strategy == "delete" else held - len(namespaces)
        threads.append({"thread_id": thread_id, "checkpoints": held, "deleted": deleted})
    return {
        "strategy": args.strategy,
        "threads": threads,
        "checkpoints": sum(t["checkpoints"] for t in threads),
        "deleted": sum(t["deleted"] for t in threads),
    }


def _plan_text(plan: dict[str, Any], strategy: str) -> str:
    count = plural(len(plan["threads"]), "thread")
    if strategy == "delete":
        return f"delete {count} ({plural(plan['checkpoints'], 'checkpoint')})"
    return (
        f"prune {count}: delete up to {plan['deleted']} of their "
        f"{plural(plan['checkpoints'], 'checkpoint')}, keeping each namespace's newest"
    )


def _dry_run_text(plan: dict[str, Any], strategy: str) -> str:
    if not plan["threads"]:
        return "dry run: no threads, nothing would be deleted"
    rows = [(t["thread_id"], t["checkpoints"], t["deleted"]) for t in plan["threads"]]
    table = _console.table(["thread", "checkpoints", "would delete"], rows)
    return f"{table}\ndry run: would {_plan_text(plan, strategy)}; nothing was deleted"


def add_verify(commands: Commands) -> None:
    sub = commands.add(
        "verify",
        cmd_verify,
        "check every stored record against its checksum; exit 1 if damaged",
        examples=(
            "statekeeper verify                        # read-only",
            "statekeeper verify --repair               # rebuild what intact records allow",
            "statekeeper --db file:///var/lib/agent verify --quarantine",
        ),
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
        # what verify() named is not reported again by the reads, unless it was repaired or
        # moved aside: then what still fails to load is news
        named = None if changes else {p.get("thread_id") for p in problems}
        threads, checked = _read_everything(saver, problems, named)
        note = None if problems or threads else _empty_note(saver)
    data = {"threads": threads, "checkpoints": checked, "problems": problems}
    if note is not None:
        data["note"] = note

    def text() -> str:
        summary = f"{threads} threads, {checked} checkpoints: "
        if not problems:
            return summary + (note or "all intact")
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


def _empty_note(saver: Any) -> str | None:
    """What to say instead of "all intact" of storage that has nothing to check: a SQLite
    file without a single table (0 bytes: SQLite's empty database, opened read-only; a
    read-write open creates the tables). Not damage: it stores nothing."""
    from statekeeper.checkpointers import SqliteCheckpointer

    if isinstance(saver, SqliteCheckpointer) and saver.is_empty_database():
        return "no statekeeper tables: an empty database"
    return None


def _read_everything(
    saver: Any, problems: list[dict[str, Any]], named: set[str | None] | None
) -> tuple[int, int]:
    """Load every checkpoint of every thread, its objects left unbuilt
    (:func:`~statekeeper._storage.serde.skeleton_reader`; loading checks every checksum
    and parses every payload); add what
    fails to ``problems``, but for the threads in ``named`` (reported already; ``None``:
    none); return how many threads were found and how many checkpoints loaded. The
    threads are found by a scan of every checkpoint, not the thread index: the index is
    one of the records checked. Only when the damage reported stops that scan are they
    those the index lists, so that what was checked is counted."""
    from statekeeper._storage.serde import skeleton_reader

    # every value rebuilt from its stored pieces and its checksum checked, every payload
    # parsed, but objects (a chat's messages) not built: they are not what is verified
    loader = skeleton_reader(saver)
    try:
        thread_ids = _thread_ids(loader, use_index=bool(named))
    except StatekeeperError as exc:
        if not named:
            problems.append({"reason": f"cannot list the threads: {exc}"})
        return 0, 0
    bar = progress("verify")
    checked = 0
    for done, thread_id in enumerate(thread_ids, 1):
        try:
            for _ in loader.list({"configurable": {"thread_id": thread_id}}):
                checked += 1
        except StatekeeperError as exc:
            if named is None or thread_id not in named:
                problems.append({"thread_id": thread_id, "reason": str(exc)})
        bar.update(done, len(thread_ids), f"threads, {checked} checkpoints")
    bar.done()
    return len(thread_ids), checked


def _thread_ids(saver: Any, *, use_index: bool) -> list[str]:
    """Every thread with a root checkpoint: by a scan, or if that fails and ``use_index``,
    as the thread index lists them."""
    from statekeeper.checkpointers.heads import Head, pager, scan_heads

    try:
        return [head.thread_id for head in scan_heads(saver)]
    except StatekeeperError:
        if not use_index:
            raise
    page, heads = pager(saver), list[Head]()
    while batch := page(100, heads[-1] if heads else None):
        heads += batch
    return [head.thread_id for head in heads]

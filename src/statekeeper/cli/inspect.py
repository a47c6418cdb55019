"""Commands that read threads and change nothing: ``threads``, ``history``, ``show`` and
``diff``, each with its arguments next to its handler.

They open the storage read-only (:func:`~statekeeper.cli._common.open_saver`), so they
work on a read-only mount and never create anything. An unknown thread or checkpoint, or
storage that does not exist, exits 3 with a message that names it.
"""

from __future__ import annotations

import argparse
from typing import Any

from statekeeper import _console
from statekeeper.cli._common import (
    EXIT,
    REF_HELP,
    CommandError,
    Commands,
    at_least_one,
    emit,
    not_found,
    open_saver,
    resolve,
)
from statekeeper.errors import ThreadNotFoundError
from statekeeper.urls import redact

__all__ = ["add_diff", "add_history", "add_show", "add_threads"]

_NS_HELP = "checkpoint namespace (subgraphs); default: the root graph"


def add_threads(commands: Commands) -> None:
    sub = commands.add(
        "threads",
        cmd_threads,
        "list threads, most recently written first",
        examples=(
            "statekeeper threads --limit 20",
            "statekeeper --db 'redis://127.0.0.1:6379/0?prefix=prod' threads --json",
        ),
    )
    sub.add_argument("--limit", type=at_least_one, default=None, metavar="N", help="show at most N")
    sub.add_argument(
        "--after", default=None, metavar="THREAD", help="start after this thread (the next page)"
    )
    sub.add_argument(
        "--status",
        action="append",
        default=None,
        metavar="STATUS",
        help="only threads with this status (running, interrupted, failed, pending, done); "
        "repeat for several",
    )


def cmd_threads(args: argparse.Namespace) -> int:
    """The threads (at most ``--limit``, after ``--after``, of a ``--status``), most
    recently written first, with their status, next nodes, step, last write and graph.
    Read from the thread index: a page costs what it shows, whatever the number of
    threads."""
    from statekeeper.threads import list_threads, summaries

    with open_saver(args.db, read_only=True) as saver:
        ids = list_threads(saver, limit=args.limit, after=args.after, status=args.status)
        rows = list(summaries(saver, ids))
    emit(
        args,
        rows,
        lambda: (
            _console.table(
                ["thread", "status", "next", "step", "updated", "graph"],
                [
                    (r.thread_id, _status(r), ", ".join(r.next), r.step, r.updated, r.graph)
                    for r in rows
                ],
            )
            if rows
            else "no threads"
        ),
    )
    return EXIT["ok"]


def _status(summary: Any) -> str:
    """A thread's status as the table shows it: a running thread says who runs it."""
    holder = summary.holder
    if summary.status != "running" or not holder:
        return str(summary.status)
    where = [f"pid {holder['pid']}"] if "pid" in holder else []
    where += [f"on {holder['host']}"] if "host" in holder else []
    return f"running ({' '.join(where)})" if where else "running"


def add_history(commands: Commands) -> None:
    sub = commands.add(
        "history",
        cmd_history,
        "list a thread's checkpoints, newest first",
        examples=(
            "statekeeper history t1 --limit 5",
            "statekeeper history t1 --json | jq '.[].step'",
        ),
    )
    sub.add_argument("thread", help="thread id")
    sub.add_argument("--limit", type=at_least_one, default=None, metavar="N", help="show at most N")
    sub.add_argument("--ns", default="", help=_NS_HELP)


def cmd_history(args: argparse.Namespace) -> int:
    """The checkpoints of ``args.thread`` in namespace ``--ns``, newest first: id,
    parent, step, source, next nodes, time and metadata. The table shows each id cut to
    the length at which the thread's ids all differ (``statekeeper.refs.short_ids``), a
    prefix every command reads back; ``--json`` keeps the full ids."""
    from statekeeper._storage.serde import skeleton_reader
    from statekeeper.refs import short_ids
    from statekeeper.threads import pending_nodes

    with open_saver(args.db, read_only=True) as saver:
        config = {"configurable": {"thread_id": args.thread, "checkpoint_ns": args.ns}}
        # every id, not only the --limit shown: a short id must be unique in the thread;
        # read without building the values' objects, which a row does not show
        listed = list(skeleton_reader(saver).list(config))
        if not listed:
            raise _not_found(saver, args)
    short = short_ids(t.checkpoint["id"] for t in listed)
    tuples = listed[: args.limit]
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
    emit(
        args,
        rows,
        lambda: _console.table(
            ["checkpoint", "step", "source", "next", "time"],
            [
                (short[r["checkpoint_id"]], r["step"], r["source"], ", ".join(r["next"]), r["ts"])
                for r in rows
            ],
        ),
    )
    return EXIT["ok"]


def add_show(commands: Commands) -> None:
    sub = commands.add(
        "show",
        cmd_show,
        "show the state stored at a checkpoint",
        examples=(
            "statekeeper show t1                       # the newest checkpoint",
            "statekeeper show t1 --checkpoint CHECKPOINT_ID --json",
        ),
    )
    sub.add_argument("thread", help="thread id")
    sub.add_argument(
        "ref",
        nargs="?",
        metavar="CHECKPOINT",
        help=f"the checkpoint (default: the newest): {REF_HELP}",
    )
    sub.add_argument("--checkpoint", metavar="CHECKPOINT", help="the same as CHECKPOINT")
    sub.add_argument("--ns", default="", help=_NS_HELP)


def cmd_show(args: argparse.Namespace) -> int:
    """The state stored at ``REF`` (or ``--checkpoint``; default: the newest) as JSON,
    with its metadata, next nodes and the interrupts its step asked; channels LangGraph
    uses internally are left out."""
    from statekeeper.threads import pending_nodes

    if args.ref is not None and args.checkpoint is not None and args.ref != args.checkpoint:
        raise CommandError("name the checkpoint once: REF or --checkpoint, not both")
    with open_saver(args.db, read_only=True) as saver:
        tup = _checkpoint(saver, args, args.ref if args.ref is not None else args.checkpoint)
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
    emit(args, data, lambda: _console.dumps(data))
    return EXIT["ok"]


def add_diff(commands: Commands) -> None:
    sub = commands.add(
        "diff",
        cmd_diff,
        "show what changed between two checkpoints",
        examples=(
            "statekeeper diff t1                       # the newest against its parent",
            "statekeeper diff t1 OLDER_ID NEWER_ID --json",
        ),
    )
    sub.add_argument("thread", help="thread id")
    sub.add_argument(
        "from_",
        nargs="?",
        metavar="FROM",
        help=f"older checkpoint (default: TO's parent): {REF_HELP}",
    )
    sub.add_argument("to", nargs="?", metavar="TO", help="newer checkpoint (default: the newest)")
    sub.add_argument("--ns", default="", help=_NS_HELP)


def cmd_diff(args: argparse.Namespace) -> int:
    """What changed in each channel from ``FROM`` (default: ``TO``'s parent) to ``TO``
    (default: the newest checkpoint); a list that only grew shows just its new items."""
    from statekeeper.threads import diff_values

    with open_saver(args.db, read_only=True) as saver:
        new = _checkpoint(saver, args, args.to)
        if args.from_ is not None:  # '' too: refused as every empty reference is
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

    emit(args, data, text)
    return EXIT["ok"]


# -- shared by the readers ----------------------------------------------------------------


def _checkpoint(saver: Any, args: argparse.Namespace, ref: str | None) -> Any:
    """The checkpoint that ``ref`` names (the newest when None) in ``args.thread``."""
    try:
        return resolve(saver, args.thread, "head" if ref is None else ref, ns=args.ns)
    except ThreadNotFoundError as exc:
        if exc.checkpoint_id is not None:
            raise
        raise _not_found(saver, args) from None


def _not_found(saver: Any, args: argparse.Namespace) -> ThreadNotFoundError:
    """``args.thread`` has no checkpoint in namespace ``--ns``: the thread is missing,
    or (when it has checkpoints in others) the namespace, said with those it has."""
    from statekeeper.refs import namespaces_text, thread_namespaces

    namespaces = thread_namespaces(saver, args.thread)
    if not namespaces:
        return not_found(args.db, args.thread)
    return ThreadNotFoundError(
        f"no namespace {args.ns!r} in thread {args.thread!r} in {redact(args.db)}; it has "
        f"{namespaces_text(namespaces)}"
    )


def _interrupts(tup: Any) -> list[dict[str, Any]]:
    return [
        {"id": getattr(value, "id", None), "value": getattr(value, "value", value)}
        for _, channel, values in tup.pending_writes or ()
        if channel == "__interrupt__"
        for value in (values if isinstance(values, list | tuple) else [values])
    ]

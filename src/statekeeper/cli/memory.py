"""``statekeeper memory ...``: search, show, stats, export and eval over a memory store.

The store is ``--store URL`` (env ``STATEKEEPER_STORE``), by default the ``--db`` URL:
statekeeper's SQLite file holds checkpoints and notes side by side. Notes are shown with
their provenance: which thread, which messages, when they were said.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from statekeeper.cli import _console
from statekeeper.errors import ConfigurationError

__all__ = ["add_memory_commands"]

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


class _UsageError(ConfigurationError):
    """A bad value on the command line (exit code 2)."""


def _store(args: argparse.Namespace) -> Any:
    from statekeeper.memory import open_store

    return open_store(args.store or os.environ.get("STATEKEEPER_STORE") or args.db)


def _namespace(args: argparse.Namespace) -> tuple[str, ...]:
    from statekeeper.memory.node import notes_namespace

    if args.namespace is not None:
        return tuple(part for part in args.namespace.split("/") if part)
    if args.thread is not None:
        return notes_namespace(args.thread)
    return ("notes",)


def _time(text: str | None, what: str) -> datetime.datetime | None:
    if text is None:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise _UsageError(f"{what} must be an ISO 8601 time, got {text!r}") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=datetime.UTC)


def _duration(text: str | None, what: str) -> datetime.timedelta | None:
    if text is None:
        return None
    match = _DURATION.fullmatch(text.strip())
    if not match or float(match[1]) <= 0:
        raise _UsageError(f"{what} must be a duration such as 30m, 12h, 7d or 2w, got {text!r}")
    return datetime.timedelta(**{_UNITS[match[2]]: float(match[1])})


def _source(provenance: dict[str, Any]) -> str:
    said = provenance.get("said_from") or provenance.get("created_at") or ""
    messages = provenance.get("message_ids") or []
    return f"thread {provenance.get('thread_id')}, messages {', '.join(messages)}, said {said[:10]}"


def cmd_search(args: argparse.Namespace) -> int:
    from statekeeper.memory import Freshness, Limits, recall

    with _store(args) as store:
        hits = recall(
            store,
            _namespace(args),
            args.query,
            freshness=Freshness(
                as_of=_time(args.as_of, "--as-of"),
                max_age=_duration(args.max_age, "--max-age"),
                include_expired=args.include_expired,
            ),
            limits=Limits(k=args.k, min_score=args.min_score),
        )
    rows = [hit.to_dict() for hit in hits]
    if args.json:
        print(_console.dumps(rows))
    elif not rows:
        print("no note is relevant enough (try --min-score lower, or another namespace)")
    else:
        print(
            _console.table(
                ["score", "note", "source", "key"],
                [
                    (f"{r['score']:.2f}", r["text"], _source(r["provenance"]), r["key"])
                    for r in rows
                ],
            )
        )
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from statekeeper.memory import Note
    from statekeeper.memory.conflicts import supersede_chain

    namespace = _namespace(args)
    with _store(args) as store:
        item = store.get(namespace, args.key)
        if item is None:
            print(
                f"statekeeper memory show: no item {args.key!r} in namespace "
                f"{'/'.join(namespace)!r}",
                file=sys.stderr,
            )
            return 3
        note = Note.from_value(item.value)
        chain = [n.key for n in supersede_chain(store, namespace, args.key)]
    shown = {"key": item.key, "namespace": list(item.namespace), **note.to_value()}
    shown["supersede_chain"] = chain
    print(_console.dumps(shown))
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    from statekeeper.memory.metrics import memory_stats

    with _store(args) as store:
        stats = memory_stats(
            store,
            thread_id=args.thread,
            since=_time(args.since, "--since"),
            until=_time(args.until, "--until"),
            window=_duration(args.window, "--window") or datetime.timedelta(days=1),
        )
    if args.json:
        print(_console.dumps(stats.to_json()))
        return 0
    headers = [
        "group", "recalls", "returned", "dropped", "top score", "empty",
        "stale", "overlap", "compactions", "tokens saved",
    ]  # fmt: skip

    def rows(group: list[Any]) -> list[tuple[Any, ...]]:
        return [
            (
                r.group,
                r.recalls,
                f"{r.notes_returned:.2f}",
                f"{r.dropped_below_floor:.2f}",
                _fmt(r.top_score),
                f"{r.empty_share:.0%}",
                _fmt(r.stale_share, percent=True),
                _fmt(r.overlap, percent=True),
                r.compactions,
                r.tokens_saved,
            )
            for r in group
        ]

    print(_console.table(headers, rows([stats.overall, *stats.threads])))
    if stats.windows:
        print()
        print(_console.table(["window", *headers[1:]], rows(stats.windows)))
    return 0


def _fmt(value: float | None, *, percent: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:.0%}" if percent else f"{value:.2f}"


def cmd_export(args: argparse.Namespace) -> int:
    prefix = _namespace(args) if (args.namespace or args.thread) else ()
    count = 0
    with contextlib.ExitStack() as stack:
        out = sys.stdout
        if args.output != "-":
            out = stack.enter_context(Path(args.output).open("w", encoding="utf-8"))
        store = stack.enter_context(_store(args))
        offset = 0
        while page := store.search(prefix, limit=500, offset=offset):
            for item in page:
                record = {
                    "namespace": list(item.namespace),
                    "key": item.key,
                    "value": item.value,
                    "created_at": item.created_at.isoformat(),
                    "updated_at": item.updated_at.isoformat(),
                }
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                count += 1
            offset += len(page)
    print(f"exported {count} item{'' if count == 1 else 's'}", file=sys.stderr)
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from statekeeper.memory import Limits
    from statekeeper.memory.eval import EvalSettings, evaluate, load_dataset, render
    from statekeeper.memory.recall import DEFAULT_MIN_SCORE

    dataset = load_dataset(args.dataset)
    floor = DEFAULT_MIN_SCORE if args.min_score is None else args.min_score
    settings = EvalSettings(
        budget_tokens=args.budget,
        limits=Limits(k=args.k, min_score=floor),
        store_url=args.eval_store,
    )
    bar = _console.Progress("eval")
    try:
        report = evaluate(
            dataset,
            settings,
            progress=lambda done, total, conversation: bar.update(done, total, conversation),
        )
    finally:
        bar.done()
    print(_console.dumps(report.to_json()) if args.json else render(report))
    return 0


def add_memory_commands(
    memory: argparse.ArgumentParser,
    common: argparse.ArgumentParser,
) -> None:
    """Add ``search``, ``show``, ``stats``, ``export`` and ``eval`` under ``memory``."""
    from statekeeper.memory.recall import DEFAULT_MIN_SCORE

    commands = memory.add_subparsers(dest="memory_command", required=True, metavar="COMMAND")

    def command(name: str, handler: Callable[[argparse.Namespace], int], text: str) -> Any:
        sub = commands.add_parser(name, parents=[common], help=text, description=text)
        sub.set_defaults(handler=handler)
        if name != "eval":
            sub.add_argument(
                "--store",
                metavar="URL",
                help="memory store (env STATEKEEPER_STORE; default: the --db URL)",
            )
        return sub

    def where(sub: Any) -> None:
        sub.add_argument("--thread", metavar="ID", help="the notes of this thread")
        sub.add_argument(
            "--namespace", metavar="A/B", help="namespace, '/'-separated (default: notes)"
        )

    sub = command("search", cmd_search, "recall the notes relevant to a query, with provenance")
    sub.add_argument("query")
    where(sub)
    sub.add_argument("--k", type=int, default=5, help="at most this many notes (default 5)")
    sub.add_argument(
        "--min-score", type=float, default=DEFAULT_MIN_SCORE, help="relevance floor, 0-1"
    )
    sub.add_argument("--as-of", metavar="TIME", help="what was known and valid then (ISO 8601)")
    sub.add_argument("--max-age", metavar="AGE", help="drop notes older than this (e.g. 30d)")
    sub.add_argument("--include-expired", action="store_true", help="also expired notes")

    sub = command("show", cmd_show, "show one note: text, provenance, validity, conflicts")
    sub.add_argument("key")
    where(sub)

    sub = command("stats", cmd_stats, "recall quality and compaction savings over time")
    sub.add_argument("--thread", metavar="ID", help="only this thread")
    sub.add_argument("--since", metavar="TIME", help="from this time (ISO 8601)")
    sub.add_argument("--until", metavar="TIME", help="until this time (ISO 8601)")
    sub.add_argument("--window", default="1d", metavar="SPAN", help="window size (default 1d)")

    sub = command("export", cmd_export, "write the store's items as JSON Lines")
    where(sub)
    sub.add_argument("-o", "--output", default="-", metavar="FILE", help="default: stdout")

    sub = command(
        "eval",
        cmd_eval,
        "measure summarization + recall against raw-message BM25 on a dataset",
    )
    sub.add_argument("dataset", metavar="DATASET.json", help="see docs/memory-eval.md")
    sub.add_argument("--budget", type=int, default=1024, metavar="TOKENS", help="default 1024")
    sub.add_argument("--k", type=int, default=10, help="notes recalled per question (default 10)")
    sub.add_argument(
        "--min-score", type=float, default=None, help="relevance floor (default: recall's)"
    )
    sub.add_argument(
        "--store",
        dest="eval_store",
        default="memory://",
        metavar="URL",
        help="store for the notes (default memory://)",
    )

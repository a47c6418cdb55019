"""``statekeeper memory ...``: search, show, stats and export over a memory store, each
with its arguments next to its handler. ``eval``, which measures recall on a dataset
rather than reading a store, is :mod:`statekeeper.cli.memory.eval`.

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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from statekeeper import _console
from statekeeper.cli._common import (
    EXIT,
    CommandError,
    Commands,
    Handler,
    Missing,
    command_line,
    info,
    read_only_options,
)
from statekeeper.cli.memory.eval import add_eval
from statekeeper.errors import ConfigurationError
from statekeeper.urls import redact

__all__ = ["add_memory"]

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_PAGE = 100  # namespaces read at a time


def add_memory(commands: Commands) -> None:
    """``memory`` and, under it, ``search``, ``show``, ``stats``, ``export`` and ``eval``."""
    memory = commands.add(
        "memory",
        _usage_of_group,
        "memory notes: search, show, stats, export, eval",
        examples=(
            "statekeeper memory search 'where does Ana work' --thread ana",
            "statekeeper memory COMMAND --help",
        ),
    )
    group = commands.group(memory, "memory_command")
    for add in (_add_search, _add_show, _add_stats, _add_export, add_eval):
        add(group)


def _usage_of_group(args: argparse.Namespace) -> int:
    raise CommandError("name a subcommand; see --help")  # argparse requires one first


def _add_search(commands: Commands) -> None:
    sub = _on_store(
        commands,
        "search",
        cmd_search,
        "recall the notes relevant to a query, with provenance",
        examples=(
            "statekeeper memory search 'what is the cat called' --thread ana",
            "statekeeper memory search 'deadline' --namespace notes --k 3 --max-age 30d --json",
        ),
    )
    sub.add_argument("query")
    _where(sub)
    sub.add_argument("--k", type=int, default=5, help="at most this many notes (default 5)")
    # None: recall's own floor, read when the command runs (the memory package is heavy)
    sub.add_argument("--min-score", type=float, default=None, help="relevance floor, 0-1")
    sub.add_argument("--as-of", metavar="TIME", help="what was known and valid then (ISO 8601)")
    sub.add_argument("--max-age", metavar="AGE", help="drop notes older than this (e.g. 30d)")
    sub.add_argument("--include-expired", action="store_true", help="also expired notes")


def cmd_search(args: argparse.Namespace) -> int:
    """At most ``--k`` notes relevant to ``args.query`` above ``--min-score`` — possibly
    none — that hold at ``--as-of``, each with its score and provenance. A search is an
    inspection, not a recall by a graph: it is not recorded, so ``memory stats`` does not
    count it."""
    from statekeeper.memory.recall import DEFAULT_MIN_SCORE, Freshness, Limits, recall

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
            limits=Limits(
                k=args.k,
                min_score=DEFAULT_MIN_SCORE if args.min_score is None else args.min_score,
            ),
            log=False,  # looking is not recalling: memory stats counts what graphs recall
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
    return EXIT["ok"]


def _add_show(commands: Commands) -> None:
    sub = _on_store(
        commands,
        "show",
        cmd_show,
        "show one note: text, provenance, validity, conflicts",
        examples=(
            "statekeeper memory show NOTE_KEY          # found in whichever namespace holds it",
            "statekeeper memory show NOTE_KEY --thread ana",
        ),
    )
    sub.add_argument("key")
    _where(sub)


def cmd_show(args: argparse.Namespace) -> int:
    """The note ``args.key`` as JSON, with the chain of notes it supersedes.

    Without ``--thread`` or ``--namespace`` the note is looked for in every namespace of
    the store: found in one, it is shown; found in several, the command stops with bad
    usage (exit 2), naming them. Not found: exit 3.
    """
    from statekeeper.memory.conflicts import supersede_chain
    from statekeeper.memory.notes import Note

    anywhere = args.thread is None and args.namespace is None
    with _store(args) as store:
        namespace = _namespace_holding(store, args) if anywhere else _namespace(args)
        item = store.get(namespace, args.key)
        if item is None:
            raise _no_note(args, namespace)
        note = Note.from_value(item.value)
        chain = [n.key for n in supersede_chain(store, namespace, args.key)]
    shown = {"key": item.key, "namespace": list(item.namespace), **note.to_value()}
    shown["supersede_chain"] = chain
    print(_console.dumps(shown))
    return EXIT["ok"]


def _namespace_holding(store: Any, args: argparse.Namespace) -> tuple[str, ...]:
    """The one namespace holding the key ``args.key`` (the metrics event log aside)."""
    from statekeeper.memory.metrics import LOG_NAMESPACE

    holders: list[tuple[str, ...]] = []
    offset = 0
    while page := store.list_namespaces(limit=_PAGE, offset=offset):
        offset += len(page)
        logs = [ns for ns in page if tuple(ns[: len(LOG_NAMESPACE)]) == LOG_NAMESPACE]
        holders += [tuple(ns) for ns in page if ns not in logs and store.get(ns, args.key)]
    if not holders:
        raise _no_note(args, None)
    if len(holders) > 1:
        names = ", ".join(repr("/".join(ns)) for ns in holders)
        raise CommandError(
            f"note {args.key!r} is in {len(holders)} namespaces: {names}; "
            "name one with --namespace (or --thread)"
        )
    return holders[0]


def _no_note(args: argparse.Namespace, namespace: tuple[str, ...] | None) -> Missing:
    url = _store_url(args)
    where = f" in namespace {'/'.join(namespace)!r}" if namespace is not None else ""
    listing = command_line("memory", "export", *(["--store", url] if args.store else []))
    return Missing(f"no note {args.key!r}{where} in {redact(url)}; `{listing}` lists the notes")


def _add_stats(commands: Commands) -> None:
    sub = _on_store(
        commands,
        "stats",
        cmd_stats,
        "recall quality and compaction savings over time",
        examples=(
            "statekeeper memory stats --window 1h",
            "statekeeper memory stats --thread ana --since 2026-03-01 --json",
        ),
    )
    sub.add_argument("--thread", metavar="ID", help="only this thread")
    sub.add_argument("--since", metavar="TIME", help="from this time (ISO 8601)")
    sub.add_argument("--until", metavar="TIME", help="until this time (ISO 8601)")
    sub.add_argument("--window", default="1d", metavar="SPAN", help="window size (default 1d)")


def cmd_stats(args: argparse.Namespace) -> int:
    """Recall quality and compaction savings overall, per thread and per ``--window``,
    between ``--since`` and ``--until``."""
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
        return EXIT["ok"]
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
    return EXIT["ok"]


def _fmt(value: float | None, *, percent: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:.0%}" if percent else f"{value:.2f}"


def _add_export(commands: Commands) -> None:
    sub = _on_store(
        commands,
        "export",
        cmd_export,
        "write the store's items as JSON Lines",
        examples=(
            "statekeeper memory export -o notes.jsonl",
            "statekeeper memory export --thread ana | jq .value.text",
        ),
    )
    _where(sub)
    sub.add_argument("-o", "--output", default="-", metavar="FILE", help="default: stdout")


def cmd_export(args: argparse.Namespace) -> int:
    """Every item under the namespace (default: the whole store) as one JSON line each,
    to ``--output`` (default: stdout); the count goes to stderr."""
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
    info(f"exported {count} item{'' if count == 1 else 's'}")
    return EXIT["ok"]


# -- shared by the memory commands ---------------------------------------------------------


class _UsageError(ConfigurationError):
    """A bad value on the command line (exit code 2)."""


def _on_store(
    commands: Commands, name: str, handler: Handler, text: str, *, examples: Sequence[str]
) -> argparse.ArgumentParser:
    """A memory command that reads the store ``--store`` (default: the ``--db`` URL)."""
    sub = commands.add(name, handler, text, examples=examples)
    sub.add_argument(
        "--store",
        metavar="URL",
        help="memory store (env STATEKEEPER_STORE; default: the --db URL)",
    )
    return sub


def _where(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--thread", metavar="ID", help="the notes of this thread")
    sub.add_argument("--namespace", metavar="A/B", help="namespace, '/'-separated (default: notes)")


def _store(args: argparse.Namespace) -> Any:
    """The store, read-only (``mode=ro`` unless its URL sets one): no command creates it."""
    from statekeeper.memory.store import known_store_schemes, open_store

    url = _store_url(args)
    return open_store(url, **read_only_options(url, known_store_schemes()))


def _store_url(args: argparse.Namespace) -> str:
    return str(args.store or os.environ.get("STATEKEEPER_STORE") or args.db)


def _namespace(args: argparse.Namespace) -> tuple[str, ...]:
    from statekeeper.memory.node import notes_namespace

    if args.namespace is not None:
        labels = tuple(part for part in args.namespace.split("/") if part)
        # the store's rule, said as a usage error before any store is read
        bad = next((label for label in labels if "." in label or "\x00" in label), None)
        if bad is not None:
            raise CommandError(
                f"--namespace {args.namespace!r}: a label cannot contain '.' or NUL ({bad!r}); "
                "labels are separated by '/'"
            )
        return labels
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

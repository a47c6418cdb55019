"""``statekeeper memory eval``: summarization + recall measured against raw-message BM25
on a dataset (:mod:`statekeeper.memory.eval`, see docs/memory-eval.md), with its arguments
next to its handler. It does not read the store the other memory commands read: its
``--store`` is where it writes its own notes (default ``memory://``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from statekeeper import _console
from statekeeper.cli._common import EXIT, CommandError, Commands, progress
from statekeeper.errors import ConfigurationError

__all__ = ["add_eval"]


def add_eval(commands: Commands) -> None:
    """``memory eval``, added to the ``memory`` group ``commands``."""
    # its --store is where the evaluation writes its own notes, not the store to read
    sub = commands.add(
        "eval",
        cmd_eval,
        "measure summarization + recall against raw-message BM25 on a dataset",
        examples=(
            "statekeeper memory eval dataset.json",
            "statekeeper memory eval dataset.json --budget 512 --k 5 --json > report.json",
        ),
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
    for flag, text in (
        ("--no-hops", "recall in one round (no multi-hop second round)"),
        ("--no-windows", "ignore the time windows questions name ('in April 2024', 'last week')"),
        ("--answers", "answer quality per condition (full history, window, summary, recall...)"),
        ("--no-sweep", "with --answers: skip the freshness sweep"),
    ):
        sub.add_argument(flag, action="store_true", help=text)
    sub.add_argument(
        "--reader",
        metavar="SPEC",
        help="with --answers: 'span' (offline, default) or a chat model 'provider:model'",
    )
    sub.add_argument(
        "--reader-budget",
        metavar="TOKENS",
        help="with --answers: the reader's context budget (default 4096; 'none': unlimited)",
    )
    sub.add_argument(
        "--chart", metavar="PATH", help="with --answers: write an SVG chart of quality vs tokens"
    )


def cmd_eval(args: argparse.Namespace) -> int:
    """Summarization + recall against raw-message BM25 on the dataset, as a report; with
    ``--answers``, answer quality per condition (see docs/memory-eval.md)."""
    from statekeeper.memory.eval import EvalSettings, evaluate, load_dataset, render
    from statekeeper.memory.recall import DEFAULT_MIN_SCORE, Limits

    given = [name for name in ("reader", "reader_budget", "chart") if getattr(args, name)]
    if args.no_sweep:
        given.append("no_sweep")
    if given and not args.answers:
        option = "--" + given[0].replace("_", "-")
        raise CommandError(f"{option} goes with --answers")
    dataset = load_dataset(args.dataset)
    floor = DEFAULT_MIN_SCORE if args.min_score is None else args.min_score
    settings = EvalSettings(
        budget_tokens=args.budget,
        limits=Limits(k=args.k, min_score=floor, **({"hops": None} if args.no_hops else {})),
        store_url=args.eval_store,
        windows=not args.no_windows,
    )
    if args.answers:
        return _eval_answers(args, dataset, settings)
    bar = progress("eval")
    try:
        report = evaluate(
            dataset,
            settings,
            progress=lambda done, total, conversation: bar.update(done, total, conversation),
        )
    finally:
        bar.done()
    print(_console.dumps(report.to_json()) if args.json else render(report))
    return EXIT["ok"]


def _eval_answers(args: argparse.Namespace, dataset: Any, pipeline: Any) -> int:
    from statekeeper.memory.eval import (
        DEFAULT_READER_BUDGET,
        AnswerSettings,
        answers_chart,
        evaluate_answers,
        reader_from,
        render_answers,
    )

    budget: int | None = DEFAULT_READER_BUDGET
    if args.reader_budget is not None:
        budget = _reader_budget(args.reader_budget)
    sweep: dict[str, Any] = {"sweep": ()} if args.no_sweep else {}
    settings = AnswerSettings(pipeline=pipeline, budget=budget, **sweep)
    reader = reader_from(args.reader)  # before the long run: a bad reader fails at once
    bar = progress("eval --answers")
    try:
        report = evaluate_answers(
            dataset,
            settings,
            reader=reader,
            progress=lambda done, total, conversation: bar.update(done, total, conversation),
        )
    finally:
        bar.done()
    if args.chart:
        try:
            Path(args.chart).write_text(answers_chart(report), encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(f"cannot write the chart to {args.chart!r}: {exc}") from exc
    print(_console.dumps(report.to_json()) if args.json else render_answers(report))
    return EXIT["ok"]


def _reader_budget(text: str) -> int | None:
    if text.strip().casefold() in ("none", "unlimited"):
        return None
    try:
        budget = int(text)
    except ValueError:
        budget = 0
    if budget < 1:
        raise CommandError(f"--reader-budget takes a number of tokens >= 1 or 'none', not {text!r}")
    return budget

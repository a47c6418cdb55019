"""Long thread benchmark: one chat thread of 1,000 turns, with and without summarization.

One thread of ``--turns`` turns (default 1,000) of the chat workload (``_chat.py``: a
~100-token user message, a ~150-token deterministic reply, one sync ``graph.invoke`` per
turn) on every saver, in two variants:

* ``plain``: the chat graph; the history grows by two messages a turn, to 2,000;
* ``summarized``: the same graph with statekeeper's ``SummarizationNode`` after the
  reply (``budget_tokens=2000``, no store: only the running summary), which keeps the
  history within the budget by compacting the oldest messages.

Every (saver, variant) row is warmed up on a throwaway instance, then measured on a fresh
one, all interleaved in this one process: turn ``n`` runs on every row (in a rotating
order) before turn ``n + 1`` runs on any, so load from elsewhere hits all rows alike.

* first 10 / last 10 turns ms: median ms of one ``invoke`` over turns 1-10 and over the
  last 10 (991-1000 at the default size);
* all turns ms: median over every turn;
* bytes: what the saver stores once closed (as in ``chat_workload.py``: serialized values
  for ``InMemorySaver``, the database file for SQLite, the files for the file store,
  ``MEMORY USAGE`` of its keys for Redis);
* messages: how many messages the thread's state holds at the end.

Ratios are taken against LangGraph's rows of the same variant. This is a benchmark, not a
test: nothing is asserted about the numbers.

    .venv/bin/python benchmarks/long_thread.py                      # 1,000 turns, ~10 min
    .venv/bin/python benchmarks/long_thread.py --turns 200 --variants summarized
    .venv/bin/python benchmarks/long_thread.py --savers memory,ours --json
"""

import argparse
import contextlib
import gc
import statistics
import sys
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _chat import build_graph, thread_config, turn_input
from _report import (
    Progress,
    Row,
    add_row_options,
    as_json,
    chosen_rows,
    ratio_table,
    rotated,
    table,
    timed_ms,
)
from _savers import BACKENDS, Backend, Store

DEFAULT_SAVERS = ("memory", "sqlite", "ours", "file", "redis")
VARIANTS = {"plain": False, "summarized": True}  # name -> with a SummarizationNode
WARMUP_TURNS = 5
EDGE_TURNS = 10
THREAD = thread_config("long")
COLUMNS = {
    "first_ms": "first 10 turns ms",
    "all_ms": "all turns ms",
    "last_ms": "last 10 turns ms",
    "bytes": "bytes stored",
    "messages": "messages at the end",
}
RATIO_COLUMNS = {key: header for key, header in COLUMNS.items() if key != "messages"}


@dataclass
class Run:
    backend: Backend
    variant: str
    row: Row
    store: Store | None = None
    graph: Any = None
    turn_ms: list[float] = field(default_factory=list)


def _label(backend: Backend, variant: str) -> str:
    return backend.label + (" + SummarizationNode" if VARIANTS[variant] else "")


def _start(run: Run, stack: contextlib.ExitStack, tmp: Path) -> None:
    """Warm the row up on a throwaway instance, then open the one measured."""
    summarize = VARIANTS[run.variant]
    with run.backend.open(tmp / f"warmup-{run.backend.key}-{run.variant}.db") as store:
        graph = build_graph(store.saver, summarize=summarize)
        for turn in range(WARMUP_TURNS):
            graph.invoke(turn_input(0, turn), thread_config("warm-up"))
    run.store = stack.enter_context(run.backend.open(tmp / f"{run.backend.key}-{run.variant}.db"))
    run.graph = build_graph(run.store.saver, summarize=summarize)


def measure(runs: list[Run], turns: int, tmp: Path) -> None:
    """Play the thread on every row, interleaved turn by turn; fill in each row."""
    with contextlib.ExitStack() as stack:
        started = []
        for run in runs:
            try:
                _start(run, stack, tmp)
            except Exception as exc:  # e.g. no Redis
                traceback.print_exc(file=sys.stderr)
                run.row["error"] = f"{type(exc).__name__}: {exc}"
            else:
                started.append(run)
        gc.collect()
        progress = Progress(turns, f"turns x {len(started)} rows")
        for turn in range(turns):
            sent = turn_input(0, turn)
            for run in rotated(started, turn):
                run.turn_ms.append(timed_ms(lambda: run.graph.invoke(sent, THREAD)))  # noqa: B023
            progress.advance()
        progress.close()
        edge = min(EDGE_TURNS, turns)
        for run in started:
            run.row["first_ms"] = statistics.median(run.turn_ms[:edge])
            run.row["all_ms"] = statistics.median(run.turn_ms)
            run.row["last_ms"] = statistics.median(run.turn_ms[-edge:])
            run.row["messages"] = len(run.graph.get_state(THREAD).values["messages"])
    for run in started:
        assert run.store is not None
        run.row["bytes"] = run.store.size()  # after the saver is closed


def main(argv: list[str] | None = None) -> int:
    keys = [b.key for b in BACKENDS if b.key != "floor"]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000, help="turns (default 1000)")
    add_row_options(parser, keys, DEFAULT_SAVERS)
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help="plain, summarized or both (default)"
    )
    args = parser.parse_args(argv)
    wanted = chosen_rows(parser, args, keys)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if bad := sorted(set(variants) - set(VARIANTS)):
        parser.error(f"unknown variant(s) {', '.join(bad)}; choose from {', '.join(VARIANTS)}")
    if args.turns < 1:
        parser.error("--turns must be >= 1")

    runs = [
        Run(b, v, {"saver": _label(b, v), "langgraph": b.langgraph, "group": v, "error": None})
        for v in variants
        for b in BACKENDS
        if b.key in wanted
    ]
    with tempfile.TemporaryDirectory(prefix="statekeeper-long-") as tmp:
        measure(runs, args.turns, Path(tmp))
    rows = [run.row for run in runs]
    if args.json:
        print(as_json({"turns": args.turns, "variants": variants}, rows, RATIO_COLUMNS))
    else:
        print(f"One thread of {args.turns} turns, every row interleaved turn by turn\n")
        print("\n".join([*table(rows, COLUMNS), *ratio_table(rows, RATIO_COLUMNS)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Chat workload benchmark: LangGraph's own checkpointers vs statekeeper's.

The workload is a chat graph (``StateGraph`` over ``messages: Annotated[list[AnyMessage],
add_messages]``) with one node, ``chatbot``, that appends a deterministic AI reply of about
150 tokens (~600 characters, built from a seeded word list so it does not compress
trivially; no LLM is called). Each turn is one sync ``graph.invoke`` with one ~100-token
(~400 characters) ``HumanMessage``. ``--threads`` conversations of ``--turns`` turns each
are played round-robin (turn 1 of every thread, then turn 2, ...), so every saver sees the
same inputs in the same order; the history of each thread grows with every turn.

Every saver is first warmed up on a throwaway instance (a few turns plus reads), then
measured on a fresh one, all in this one process and interleaved: turn ``n`` of every
thread runs on every saver (in a rotating order) before turn ``n + 1`` runs on any, and the
reads alternate the same way, so load from elsewhere on the machine hits all savers alike:

* first 10 / all / last 10: median ms of one invoke over the first 10 turns of every
  thread, over all its turns, over its last 10 turns;
* get_state: median ms of ~20 ``graph.get_state`` calls on the finished threads;
* list(10): median ms of ~20 ``saver.list(config, limit=10)`` calls, fully consumed;
* history: ms to consume ``graph.get_state_history`` of one whole thread, median over threads;
* bytes: what the saver stores -- for ``InMemorySaver`` the sum of its serialized values,
  for the SQLite savers the database file (plus any ``-wal``) after closing the saver and
  ``PRAGMA wal_checkpoint(TRUNCATE)``, for the file store its files, for Redis the
  ``MEMORY USAGE`` of its keys, for ``PostgresSaver`` its tables with indexes and TOAST.

Two rows give the networked savers a scale: LangGraph's ``PostgresSaver``, its own saver
over a network (needs the ``dev`` extra, which ``make bench`` installs, and PostgreSQL at
``$POSTGRES_URL``, default the local server), and the loopback floor, an ``InMemorySaver``
that makes one bare ``PING`` round trip to Redis per ``get_tuple``, ``put`` and
``put_writes``: what a turn's six round trips cost before any storage work. The SQLite
floor (``commit``) does the same for the embedded savers: an ``InMemorySaver`` that also
commits one small SQLite transaction (WAL, ``synchronous=NORMAL``, as statekeeper's
SQLite) per ``put`` and ``put_writes``: what durability costs before any storage logic.
The file floor (``file-floor``) is the same for the file checkpointer: an
``InMemorySaver`` that appends one line to a log and flushes it (``fdatasync``) per
``put`` and ``put_writes`` (``_floors.py``). Ratios of every other row to each LangGraph
saver are printed under the table (< 1 means faster or smaller). This is a benchmark,
not a test: nothing is asserted about the numbers.

Run it with ``make bench`` or::

    .venv/bin/python benchmarks/chat_workload.py                  # 3 threads x 200 turns
    .venv/bin/python benchmarks/chat_workload.py --threads 2 --turns 50 --savers memory,ours
    .venv/bin/python benchmarks/chat_workload.py --savers memory,floor,redis,postgres
    .venv/bin/python benchmarks/chat_workload.py --savers memory,commit,ours
    .venv/bin/python benchmarks/chat_workload.py --json           # machine-readable results
"""

import argparse
import contextlib
import functools
import gc
import statistics
import sys
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from _chat import build_graph, play, thread_config, turn_input
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
from _savers import BACKENDS, ON_REQUEST, Backend, Store
from langgraph.checkpoint.base import BaseCheckpointSaver

WARMUP_TURNS = 5
READ_SAMPLES = 20
EDGE_TURNS = 10  # "first 10" and "last 10" columns


# -- measuring ---------------------------------------------------------------------------

COLUMNS = {  # Result field -> table header
    "first_ms": "first 10 turns ms",
    "all_ms": "all turns ms",
    "last_ms": "last 10 turns ms",
    "get_state_ms": "get_state ms",
    "list_ms": "list(limit=10) ms",
    "history_ms": "full history ms",
    "bytes": "bytes stored",
}


@dataclass
class Result:
    saver: str
    langgraph: bool
    first_ms: float | None = None
    all_ms: float | None = None
    last_ms: float | None = None
    get_state_ms: float | None = None
    list_ms: float | None = None
    history_ms: float | None = None
    bytes: int | None = None
    checkpoints_per_thread: int | None = None
    error: str | None = None
    turn_ms: list[list[float]] = field(default_factory=list, repr=False)
    samples: list[float] = field(default_factory=list, repr=False)

    def row(self) -> Row:
        """What the report prints: every field but the raw samples."""
        row = asdict(self)
        del row["turn_ms"], row["samples"]
        return row


@dataclass
class Run:
    """One saver being measured: its open store, its graph and what was measured so far."""

    backend: Backend
    store: Store
    graph: Any
    result: Result


def exercise_reads(graph: Any, saver: BaseCheckpointSaver[Any], thread_ids: list[str]) -> None:
    for thread_id in thread_ids:
        config = thread_config(thread_id)
        graph.get_state(config)
        list(saver.list(config, limit=10))
        list(graph.get_state_history(config))


def warm_up(backend: Backend, tmp: Path) -> None:
    """Run the code paths once on a throwaway instance so imports and caches are not timed."""
    with backend.open(tmp / f"warmup-{backend.key}.db") as store:
        graph = build_graph(store.saver)
        play(graph, ["warmup"], WARMUP_TURNS)
        exercise_reads(graph, store.saver, ["warmup"])


def timed_each(runs: list[Run], samples: int, call: Callable[[Run, int], object]) -> None:
    """Time ``call(run, i)`` for every run, interleaved sample by sample, into
    ``run.result.samples``."""
    for i in range(samples):
        for run in rotated(runs, i):
            run.result.samples.append(timed_ms(functools.partial(call, run, i)))


def measure(backends: list[Backend], threads: int, turns: int, tmp: Path) -> list[Result]:
    """Measure every saver in one interleaved run: turn ``n`` of every thread is played on
    every saver before turn ``n + 1`` on any, and reads alternate the same way, so a burst
    of load on the machine slows every saver alike and the ratios stay meaningful."""
    results = [Result(backend.label, backend.langgraph) for backend in backends]
    thread_ids = [f"thread-{t}" for t in range(threads)]
    with contextlib.ExitStack() as stack:
        runs = []
        for backend, result in zip(backends, results, strict=True):
            try:
                warm_up(backend, tmp)
                store = stack.enter_context(backend.open(tmp / f"{backend.key}.db"))
            except Exception as exc:  # e.g. ours not importable, or no Redis
                traceback.print_exc(file=sys.stderr)
                result.error = f"{type(exc).__name__}: {exc}"
                continue
            runs.append(Run(backend, store, build_graph(store.saver), result))
            result.turn_ms = [[] for _ in thread_ids]
        gc.collect()
        progress = Progress(turns, f"turns x {threads} threads x {len(runs)} savers")
        for turn in range(turns):
            for run in rotated(runs, turn):
                for t, thread_id in enumerate(thread_ids):
                    sent, config = turn_input(t, turn), thread_config(thread_id)
                    ms = timed_ms(lambda: run.graph.invoke(sent, config))  # noqa: B023
                    run.result.turn_ms[t].append(ms)
            progress.advance()
        progress.close()
        edge = min(EDGE_TURNS, turns)
        for run in runs:
            rows = run.result.turn_ms
            run.result.first_ms = statistics.median(ms for row in rows for ms in row[:edge])
            run.result.all_ms = statistics.median(ms for row in rows for ms in row)
            run.result.last_ms = statistics.median(ms for row in rows for ms in row[-edge:])
        configs = [thread_config(thread_ids[i % threads]) for i in range(READ_SAMPLES)]
        reads: list[tuple[str, int, Callable[[Run, int], object]]] = [
            ("get_state_ms", READ_SAMPLES, lambda run, i: run.graph.get_state(configs[i])),
            (
                "list_ms",
                READ_SAMPLES,
                lambda run, i: list(run.store.saver.list(configs[i], limit=10)),
            ),
            (
                "history_ms",
                threads,
                lambda run, i: list(run.graph.get_state_history(thread_config(thread_ids[i]))),
            ),
        ]
        for column, samples, call in reads:
            timed_each(runs, samples, call)
            for run in runs:
                setattr(run.result, column, statistics.median(run.result.samples))
                run.result.samples.clear()
        for run in runs:
            run.result.checkpoints_per_thread = len(list(run.store.saver.list(configs[0])))
    for run in runs:
        run.result.bytes = run.store.size()  # after the saver is closed
    return results


# -- reporting ---------------------------------------------------------------------------


def markdown(rows: list[Row], threads: int, turns: int) -> str:
    per_thread = next((r["checkpoints_per_thread"] for r in rows if r["error"] is None), "-")
    lines = [
        f"Chat workload: {threads} threads x {turns} turns (checkpoints per thread: {per_thread})",
        "",
        *table(rows, COLUMNS),
        *ratio_table(rows, COLUMNS),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    keys = [b.key for b in BACKENDS]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=3, help="conversations (default 3)")
    parser.add_argument("--turns", type=int, default=200, help="turns per thread (default 200)")
    add_row_options(parser, keys, [k for k in keys if k not in ON_REQUEST])
    args = parser.parse_args(argv)
    wanted = chosen_rows(parser, args, keys)
    if args.threads < 1 or args.turns < 1:
        parser.error("--threads and --turns must be >= 1")

    backends = [b for b in BACKENDS if b.key in wanted]
    with tempfile.TemporaryDirectory(prefix="statekeeper-bench-") as tmp:
        rows = [r.row() for r in measure(backends, args.threads, args.turns, Path(tmp))]
    if args.json:
        print(as_json({"threads": args.threads, "turns": args.turns}, rows, COLUMNS))
    else:
        print(markdown(rows, args.threads, args.turns))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Async fleet benchmark: many conversations at once through ``graph.ainvoke`` on one loop.

``--conversations`` threads (default 50) each play ``--turns`` turns (default 20) of the
chat workload (``_chat.py``) through ``await graph.ainvoke(...)``, all on one asyncio event
loop, as a server handling many chats at once does. A round is turn ``n`` of every
conversation started at once (``asyncio.gather``); every saver plays round ``n`` (in a
rotating order) before any plays round ``n + 1``, so load from elsewhere on the machine
hits all savers alike, and a saver's time is the sum of its rounds.

* turns/s: conversations x turns / the saver's time;
* p50 / p95 turn ms: percentiles of one ``ainvoke``'s latency, from its start to its end
  (it includes waiting for the event loop and for the saver's connection or threads).

Rows: LangGraph's ``InMemorySaver``, ``AsyncSqliteSaver`` (one ``aiosqlite``
connection) and ``AsyncPostgresSaver`` (one async connection to ``$POSTGRES_URL``,
default the local server; the row is skipped, saying why, if nothing answers there), and
statekeeper's SQLite, file, Redis (``$REDIS_URL``) and PostgreSQL checkpointers, each
warmed up on a throwaway instance first. Run when asked for (``--savers
...,yield,hop,pg-floor``): ``InMemorySaver`` that yields to the loop once per call, one
that runs each call in a worker thread — what scheduling alone does to the fleet, with
no storage work — one that sends one PostgreSQL statement per call on psycopg's asyncio
pool (``SELECT 1``, or a one-row ``INSERT`` for a write: the PostgreSQL floor); the
floors of statekeeper's own way of serving a fleet (``_floors.py``): ``InMemorySaver``
served as ours are, in batches on one thread, plus one SQLite commit per batch
(``commit``), one flushed line per write (``file-floor``) or one Redis ``PING`` per call
(``redis-floor``); ``file-nosync``, the file checkpointer with ``fsync=false`` (what its
flushes cost), and ``redis-asyncio``, the Redis checkpointer on redis-py's asyncio
client. Ratios
are taken against LangGraph's rows. This is a benchmark, not a test: nothing is asserted
about the numbers.

    .venv/bin/python benchmarks/fleet.py                          # 50 x 20
    .venv/bin/python benchmarks/fleet.py --conversations 200 --turns 5 --savers memory,ours
    .venv/bin/python benchmarks/fleet.py --savers memory,yield,hop,ours,file,redis
    .venv/bin/python benchmarks/fleet.py --savers memory,postgres,pg-floor,pg
    .venv/bin/python benchmarks/fleet.py --savers memory,commit,ours,file-floor,file,redis-floor
    .venv/bin/python benchmarks/fleet.py --json
"""

import argparse
import asyncio
import contextlib
import gc
import statistics
import sys
import tempfile
import time
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
    percentile,
    ratio_table,
    rotated,
    table,
)
from _savers import ASYNC_BACKENDS, AsyncBackend, postgres_unreachable

WARMUP = (3, 3)  # conversations, turns
# rows run only when asked for
ON_REQUEST = (
    *("yield", "hop", "pg-floor", "commit", "file-floor", "redis-floor"),
    *("file-nosync", "redis-asyncio"),
)
COLUMNS = {
    "turns_per_s": "turns/s",
    "p50_ms": "p50 turn ms",
    "p95_ms": "p95 turn ms",
}
CAPTION = (
    "Ratios to LangGraph's savers (turns/s: > 1 is more turns a second than LangGraph's;"
    " latency: < 1 is faster):"
)


@dataclass
class Run:
    backend: AsyncBackend
    row: Row
    graph: Any = None
    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)


async def _turn(graph: Any, conversation: int, turn: int) -> float:
    start = time.perf_counter()
    await graph.ainvoke(turn_input(conversation, turn), thread_config(f"chat-{conversation}"))
    return (time.perf_counter() - start) * 1000


async def play_round(run: Run, conversations: int, turn: int) -> None:
    """Turn ``turn`` of every conversation at once; its time is added to the run's."""
    start = time.perf_counter()
    latencies = await asyncio.gather(*(_turn(run.graph, c, turn) for c in range(conversations)))
    run.seconds += time.perf_counter() - start
    run.latencies_ms.extend(latencies)


async def _start(run: Run, stack: contextlib.AsyncExitStack, tmp: Path) -> None:
    """Warm the row up on a throwaway instance, then open the one measured."""
    backend = run.backend
    async with backend.open(tmp / f"warmup-{backend.key}.db") as saver:
        warm = Run(backend, {}, build_graph(saver))
        for turn in range(WARMUP[1]):
            await play_round(warm, WARMUP[0], turn)
    saver = await stack.enter_async_context(backend.open(tmp / f"{backend.key}.db"))
    run.graph = build_graph(saver)


async def measure(runs: list[Run], conversations: int, turns: int, tmp: Path) -> None:
    async with contextlib.AsyncExitStack() as stack:
        started = []
        for run in runs:
            on_postgres = run.backend.key in ("postgres", "pg", "pg-floor")
            if on_postgres and (reason := postgres_unreachable()):
                print(f"skipping {run.row['saver']}: {reason}", file=sys.stderr)
                run.row["error"] = reason
                continue
            try:
                await _start(run, stack, tmp)
            except Exception as exc:  # e.g. no Redis, a package missing
                traceback.print_exc(file=sys.stderr)
                run.row["error"] = f"{type(exc).__name__}: {exc}"
            else:
                started.append(run)
        gc.collect()
        progress = Progress(turns, f"rounds of {conversations} turns x {len(started)} savers")
        for turn in range(turns):
            for run in rotated(started, turn):
                await play_round(run, conversations, turn)
            progress.advance()
        progress.close()
    for run in started:
        run.row["turns_per_s"] = conversations * turns / run.seconds
        run.row["p50_ms"] = statistics.median(run.latencies_ms)
        run.row["p95_ms"] = percentile(run.latencies_ms, 95)


def main(argv: list[str] | None = None) -> int:
    keys = [b.key for b in ASYNC_BACKENDS]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=50, help="at once (default 50)")
    parser.add_argument("--turns", type=int, default=20, help="turns each (default 20)")
    add_row_options(parser, keys, [k for k in keys if k not in ON_REQUEST])
    args = parser.parse_args(argv)
    wanted = chosen_rows(parser, args, keys)
    if args.conversations < 1 or args.turns < 1:
        parser.error("--conversations and --turns must be >= 1")

    runs = [
        Run(b, {"saver": b.label, "langgraph": b.langgraph, "error": None})
        for b in ASYNC_BACKENDS
        if b.key in wanted
    ]
    with tempfile.TemporaryDirectory(prefix="statekeeper-fleet-") as tmp:
        asyncio.run(measure(runs, args.conversations, args.turns, Path(tmp)))
    rows = [run.row for run in runs]
    sizes = {"conversations": args.conversations, "turns": args.turns}
    if args.json:
        print(as_json(sizes, rows, COLUMNS))
    else:
        print(
            f"{args.conversations} conversations x {args.turns} turns through ainvoke,"
            " one event loop, rounds interleaved\n"
        )
        print("\n".join([*table(rows, COLUMNS), *ratio_table(rows, COLUMNS, CAPTION)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

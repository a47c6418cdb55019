"""Global scan benchmark: what do reads across every thread cost as the store grows?

Builds ``--threads`` threads of ``--checkpoints`` checkpoints each on every saver (direct
``put`` calls: a small counter channel, and metadata with a ``user`` key that 1 % of the
threads share), then times, each the median of ``--samples`` calls, taken in one
interleaved run (every sample visits every saver, in a rotating order):

* ``list(None, limit=10)``: the newest 10 checkpoints of all threads, fully consumed;
* ``list(None, filter={"user": ...}, limit=10)``: the newest 10 of one user's;
* ``newest 20 threads``: ``statekeeper.threads.list_threads(saver, limit=20)``: read from
  the thread index on statekeeper's savers, by one scan of every checkpoint on
  LangGraph's (which keep no index) -- the same call a user makes on either.

The rows are LangGraph's ``InMemorySaver`` and ``SqliteSaver`` and statekeeper's SQLite
(with ``index_metadata=user``, so the filter column measures its metadata index), file
(built with ``fsync=false``: building speed is not what is measured) and Redis
(``$REDIS_URL``, default the local server; with ``index_metadata=["user"]`` too, so its
filter column measures its metadata index) and PostgreSQL (``$POSTGRES_URL``, a schema
of its own, dropped afterwards); ratios are to LangGraph's rows. This is a
benchmark, not a test: nothing is asserted about the numbers.

    .venv/bin/python benchmarks/global_scan.py                       # 200 x 20, a minute
    .venv/bin/python benchmarks/global_scan.py --threads 10000 --checkpoints 100
    .venv/bin/python benchmarks/global_scan.py --savers memory,ours --json
"""

import argparse
import contextlib
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _report import (
    Progress,
    add_row_options,
    as_json,
    chosen_rows,
    ratio_table,
    rotated,
    table,
    timed_ms,
)
from _savers import (
    BACKENDS,
    Backend,
    Store,
    open_ours_file_unsynced,
    open_ours_postgres,
    open_ours_redis,
    sqlite_file_bytes,
)
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

from statekeeper.threads import list_threads

COLUMNS = {
    "list_ms": "list(None, limit=10) ms",
    "filter_ms": "list(filter=user, limit=10) ms",
    "threads_ms": "newest 20 threads ms",
}
USERS = 100  # threads of user-N: every 100th


@contextmanager
def _open_ours_indexed(path: Path) -> Iterator[Store]:
    from statekeeper.checkpointers import open_checkpointer

    with open_checkpointer(f"sqlite:///{path.resolve()}?index_metadata=user") as saver:
        yield Store(saver, lambda: sqlite_file_bytes(path))


ROWS = [
    *(b for b in BACKENDS if b.key in ("memory", "sqlite")),
    Backend("ours", "statekeeper SqliteCheckpointer (index_metadata=user)", _open_ours_indexed),
    Backend("file", "statekeeper FileCheckpointer (fsync=false)", open_ours_file_unsynced),
    Backend(
        "redis",
        "statekeeper RedisCheckpointer (index_metadata=user)",
        lambda path: open_ours_redis(path, index_metadata=["user"]),
    ),
    Backend("pg", "statekeeper PostgresCheckpointer", open_ours_postgres),
]
KEYS = [row.key for row in ROWS]


def build(saver: Any, threads: int, checkpoints: int, progress: Progress) -> None:
    """Threads written in turns, as a busy service writes them: a checkpoint of every
    thread, then the next one of each, so every thread's newest is recent."""
    configs: list[dict[str, Any]] = [
        {"configurable": {"thread_id": f"thread-{t:06d}", "checkpoint_ns": ""}}
        for t in range(threads)
    ]
    versions: list[Any] = [None] * threads
    for step in range(checkpoints):
        for t in range(threads):
            versions[t] = saver.get_next_version(versions[t], None)
            checkpoint = empty_checkpoint()
            checkpoint["id"] = str(uuid6())
            checkpoint["channel_values"] = {"counter": step}
            checkpoint["channel_versions"] = {"counter": versions[t]}
            metadata = {"source": "loop", "step": step, "parents": {}, "user": f"user-{t % USERS}"}
            configs[t] = saver.put(configs[t], checkpoint, metadata, {"counter": versions[t]})
        progress.advance(threads)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=200)
    parser.add_argument("--checkpoints", type=int, default=20, help="per thread (20)")
    parser.add_argument("--samples", type=int, default=7, help="calls per median (7)")
    add_row_options(parser, KEYS)
    args = parser.parse_args(argv)
    wanted = chosen_rows(parser, args, KEYS)
    rows_to_run = [row for row in ROWS if row.key in wanted]
    user = {"user": f"user-{(args.threads - 1) % USERS}"}
    results: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="statekeeper-scan-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        opened: list[tuple[dict[str, Any], Any]] = []
        for row in rows_to_run:
            result: dict[str, Any] = {"saver": row.label, "langgraph": row.langgraph, "error": None}
            results.append(result)
            try:
                store = stack.enter_context(row.open(Path(tmp) / row.key))
                progress = Progress(args.threads * args.checkpoints, f"build {row.key}")
                try:
                    build(store.saver, args.threads, args.checkpoints, progress)
                finally:
                    progress.close()
            except Exception as exc:  # a saver that cannot run here (no Redis...)
                result["error"] = f"{type(exc).__name__}: {exc}"[:200]
                continue
            opened.append((result, store.saver))
        samples: dict[int, dict[str, list[float]]] = {
            id(result): {column: [] for column in COLUMNS} for result, _ in opened
        }
        progress = Progress(args.samples * len(opened), "measure")
        for sample in range(args.samples):
            for result, saver in rotated(opened, sample):
                taken = samples[id(result)]
                taken["list_ms"].append(timed_ms(lambda s=saver: list(s.list(None, limit=10))))
                taken["filter_ms"].append(
                    timed_ms(lambda s=saver: list(s.list(None, filter=user, limit=10)))
                )
                taken["threads_ms"].append(timed_ms(lambda s=saver: list_threads(s, limit=20)))
                progress.advance()
        progress.close()
        for result, _ in opened:
            for column, values in samples[id(result)].items():
                result[column] = statistics.median(values)
    payload = {"threads": args.threads, "checkpoints": args.checkpoints, "samples": args.samples}
    if args.json:
        print(as_json(payload, results, COLUMNS))
        return 0
    print(
        f"{args.threads:,} threads x {args.checkpoints} checkpoints "
        f"({args.threads * args.checkpoints:,} per saver); median of {args.samples}:\n"
    )
    print("\n".join(table(results, COLUMNS)))
    print("\n".join(ratio_table(results, COLUMNS)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Peak memory benchmark: the resident set a process needs to play the chat workload.

Each saver plays the chat workload of ``chat_workload.py`` (``--threads`` conversations
of ``--turns`` turns, default 3 x 200, round-robin, one sync ``invoke`` per turn) in a
fresh Python process of its own, which reports its peak resident set size
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``) twice: once the saver is open (imports,
connections: the baseline) and after the workload. The children run one after another,
in a rotating order when ``--repeat`` is more than 1 (the table gives the medians).

* peak MiB: the process's peak RSS after the workload;
* baseline MiB: its peak RSS before the first turn;
* workload MiB: the difference, what the workload itself added;
* seconds: the child's time for the workload (a rough figure: children do not overlap,
  so this is not interleaved; ``chat_workload.py`` is the timing benchmark).

For Redis and PostgreSQL only the client process is measured, not the server. Ratios are
taken against LangGraph's rows. This is a benchmark, not a test: nothing is asserted
about the numbers.

    .venv/bin/python benchmarks/peak_rss.py                        # 3 x 200, every saver
    .venv/bin/python benchmarks/peak_rss.py --threads 1 --turns 50 --savers memory,ours
    .venv/bin/python benchmarks/peak_rss.py --repeat 3 --json
"""

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _chat import build_graph, play
from _report import (
    Progress,
    Row,
    add_row_options,
    as_json,
    chosen_rows,
    ratio_table,
    rotated,
    table,
)
from _savers import BACKENDS, FLOORS, ON_REQUEST

KEYS = [b.key for b in BACKENDS if b.key not in FLOORS]
COLUMNS = {
    "peak_mib": "peak MiB",
    "baseline_mib": "baseline MiB",
    "workload_mib": "workload MiB",
    "seconds": "seconds",
}


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def child(key: str, threads: int, turns: int, directory: Path) -> None:
    """In the fresh process: open the saver, play the workload, print what it took."""
    backend = next(b for b in BACKENDS if b.key == key)
    with backend.open(directory / f"{key}.db") as store:
        graph = build_graph(store.saver)
        baseline = _peak_mib()
        start = time.perf_counter()
        play(graph, [f"thread-{t}" for t in range(threads)], turns)
        seconds = time.perf_counter() - start
        peak = _peak_mib()
    print(json.dumps({"baseline_mib": baseline, "peak_mib": peak, "seconds": seconds}))


def run_child(key: str, threads: int, turns: int, directory: Path) -> dict[str, float]:
    sizes = ("--threads", str(threads), "--turns", str(turns))
    done = subprocess.run(
        [sys.executable, __file__, "--child", key, *sizes, "--dir", str(directory)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise RuntimeError(last)
    measured: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return measured


def measure(keys: list[str], threads: int, turns: int, repeat: int) -> list[Row]:
    rows = {
        b.key: {"saver": b.label, "langgraph": b.langgraph, "error": None}
        for b in BACKENDS
        if b.key in keys
    }
    samples: dict[str, list[dict[str, float]]] = {key: [] for key in rows}
    progress = Progress(repeat * len(rows), "child processes")
    for i in range(repeat):
        for key in rotated(list(rows), i):
            if rows[key]["error"] is None:
                with tempfile.TemporaryDirectory(prefix="statekeeper-rss-") as tmp:
                    try:
                        samples[key].append(run_child(key, threads, turns, Path(tmp)))
                    except RuntimeError as exc:  # e.g. no Redis: the row says why
                        rows[key]["error"] = str(exc)
            progress.advance(note=key)
    progress.close()
    for key, row in rows.items():
        if row["error"] is None:
            for column in ("peak_mib", "baseline_mib", "seconds"):
                row[column] = statistics.median(s[column] for s in samples[key])
            row["workload_mib"] = statistics.median(
                s["peak_mib"] - s["baseline_mib"] for s in samples[key]
            )
    return list(rows.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=3, help="conversations (default 3)")
    parser.add_argument("--turns", type=int, default=200, help="turns per thread (default 200)")
    add_row_options(parser, KEYS, [k for k in KEYS if k not in ON_REQUEST])
    parser.add_argument("--repeat", type=int, default=1, help="children per saver (default 1)")
    parser.add_argument("--child", choices=KEYS, help=argparse.SUPPRESS)
    parser.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.threads, args.turns, args.dir)
        return 0
    wanted = chosen_rows(parser, args, KEYS)
    if args.threads < 1 or args.turns < 1 or args.repeat < 1:
        parser.error("--threads, --turns and --repeat must be >= 1")

    rows = measure(wanted, args.threads, args.turns, args.repeat)
    ratio_columns = {k: v for k, v in COLUMNS.items() if k != "seconds"}
    sizes = {"threads": args.threads, "turns": args.turns, "repeat": args.repeat}
    if args.json:
        print(as_json(sizes, rows, ratio_columns))
    else:
        print(
            f"Peak RSS, chat workload {args.threads} threads x {args.turns} turns,"
            " one fresh process per saver\n"
        )
        print("\n".join([*table(rows, COLUMNS), *ratio_table(rows, ratio_columns)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

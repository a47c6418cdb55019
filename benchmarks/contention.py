"""Contention benchmark: several processes running one thread at once, per backend.

Each worker process loops for ``--seconds``, invoking a one-node counter graph on the same
thread: the node reads ``count`` and writes ``count + 1``, so two runs that overlap lose an
increment unless they are serialised. Each run's input names the run (``runs`` grows by
it), and its checkpoints carry the name in their metadata. The modes:

* ``enqueue``: ``run_exclusive(..., multitask="enqueue")``: a run waits for the thread;
* ``reject``: ``run_exclusive(..., multitask="reject")``: a busy thread refuses the run with
  ``ThreadBusyError`` (the worker then pauses 1 ms and starts a new run);
* ``none``: plain ``graph.invoke`` (LangGraph's semantics: concurrent runs branch), for
  comparison.

For every backend and mode it reports the runs completed (in all and per process), the
runs refused, the increments expected (runs completed) and found (the final ``count``),
and the checkpoints stored. The guarantees checked — and the exit status is 1 if one
fails — are: ``enqueue`` and ``reject`` lose no increment (count == runs completed, and
every completed run's name is in ``runs``), and nothing is stored for a refused run (no
checkpoint names it; three checkpoints per completed run). ``none`` is expected to lose.

Run it with::

    .venv/bin/python benchmarks/contention.py                    # 4 processes x 30 s
    .venv/bin/python benchmarks/contention.py --processes 2 --seconds 3 --backends sqlite
    .venv/bin/python benchmarks/contention.py --modes enqueue,reject,none --json

Redis is ``$REDIS_URL`` (default ``redis://127.0.0.1:6379/0``), under a key prefix of its
own that is deleted afterwards. This is a benchmark: the numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import START, StateGraph

THREAD = "contended"
CHECKPOINTS_PER_RUN = 3  # the input, the start step, the increment
BACKENDS = ("sqlite", "file", "redis")
MODES = ("enqueue", "reject", "none")


class Count(TypedDict, total=False):
    count: int
    runs: Annotated[list[str], operator.add]


def increment(state: Count) -> dict[str, Any]:
    return {"count": state.get("count", 0) + 1}


builder = StateGraph(Count)
builder.add_node("increment", increment)
builder.add_edge(START, "increment")


# -- a worker process -----------------------------------------------------------------------


def work(url: str, mode: str, seconds: float) -> dict[str, Any]:
    """Run the thread until ``seconds`` have passed; what happened to each run."""
    from statekeeper.checkpointers import open_checkpointer
    from statekeeper.errors import ThreadBusyError
    from statekeeper.graphs import run_exclusive

    done: list[str] = []
    refused: list[str] = []
    messages: set[str] = set()
    with open_checkpointer(url) as saver:
        graph = builder.compile(checkpointer=saver)
        print("ready", flush=True)
        sys.stdin.readline()  # every worker starts at once
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            run = uuid.uuid4().hex
            config: Any = {"configurable": {"thread_id": THREAD}, "metadata": {"run": run}}
            try:
                if mode == "none":
                    graph.invoke({"runs": [run]}, config)
                else:
                    run_exclusive(graph, {"runs": [run]}, config, multitask=mode)  # type: ignore[arg-type]
            except ThreadBusyError as exc:
                refused.append(run)
                messages.add(str(exc).split(" (")[0])
                time.sleep(0.001)  # a client told "busy" does not retry in a tight loop
            else:
                done.append(run)
    return {"done": done, "refused": refused, "messages": sorted(messages)}


# -- the benchmark --------------------------------------------------------------------------


@contextmanager
def storage(backend: str) -> Iterator[str]:
    """A fresh URL of ``backend``, deleted afterwards."""
    if backend == "redis":
        base = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
        url = f"{base}{'&' if '?' in base else '?'}prefix=bench-contention-{uuid.uuid4().hex[:8]}"
        try:
            yield url
        finally:
            from statekeeper.checkpointers import open_checkpointer

            with open_checkpointer(url) as saver:
                saver.delete_thread(THREAD)
        return
    with tempfile.TemporaryDirectory(prefix="statekeeper-contention-") as tmp:
        yield f"sqlite:///{tmp}/state.db" if backend == "sqlite" else f"file://{tmp}/files"


def measure(backend: str, mode: str, processes: int, seconds: float) -> dict[str, Any]:
    with storage(backend) as url:
        here = Path(__file__).resolve()
        children = [
            subprocess.Popen(
                [sys.executable, str(here), "--worker", url, mode, str(seconds)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(processes)
        ]
        for child in children:
            assert child.stdout is not None
            if child.stdout.readline().strip() != "ready":
                raise SystemExit(f"a {backend} worker did not start")
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        reports = []
        for child in children:
            out, _ = child.communicate(timeout=seconds + 300)
            if child.returncode != 0:
                raise SystemExit(f"a {backend} worker failed (exit {child.returncode})")
            reports.append(json.loads(out.splitlines()[-1]))
        return summarise(url, backend, mode, seconds, reports)


def summarise(
    url: str, backend: str, mode: str, seconds: float, reports: list[dict[str, Any]]
) -> dict[str, Any]:
    from statekeeper.checkpointers import open_checkpointer

    done = [run for report in reports for run in report["done"]]
    refused = {run for report in reports for run in report["refused"]}
    with open_checkpointer(url) as saver:
        config: Any = {"configurable": {"thread_id": THREAD}}
        tup = saver.get_tuple(config)
        values = tup.checkpoint["channel_values"] if tup else {}
        named = [t.metadata.get("run") for t in saver.list(config)]
    found = values.get("count", 0)
    row = {
        "backend": backend,
        "mode": mode,
        "processes": len(reports),
        "seconds": seconds,
        "runs": len(done),
        "runs_per_process": [len(report["done"]) for report in reports],
        "refused": len(refused),
        "expected": len(done),
        "found": found,
        "checkpoints": len(named),
        "refused_with_checkpoints": len(refused & set(named)),
        "messages": sorted({m for report in reports for m in report["messages"]}),
    }
    kept = sorted(values.get("runs", [])) == sorted(done)
    row["holds"] = mode == "none" or (
        found == len(done)
        and kept
        and row["refused_with_checkpoints"] == 0
        and len(named) == CHECKPOINTS_PER_RUN * len(done)
    )
    return row


def table(rows: list[dict[str, Any]]) -> str:
    head = [
        "backend",
        "mode",
        "runs done",
        "per process",
        "refused",
        "increments expected",
        "found",
        "lost",
        "checkpoints",
        "refused runs stored",
        "guarantee",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [
            r["backend"],
            r["mode"],
            r["runs"],
            "/".join(map(str, r["runs_per_process"])),
            r["refused"],
            r["expected"],
            r["found"],
            r["expected"] - r["found"],
            r["checkpoints"],
            r["refused_with_checkpoints"],
            "n/a" if r["mode"] == "none" else ("holds" if r["holds"] else "BROKEN"),
        ]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=4, help="worker processes (default 4)")
    parser.add_argument("--seconds", type=float, default=30.0, help="per backend and mode")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="sqlite,file,redis")
    parser.add_argument("--modes", default="enqueue,reject", help="enqueue,reject,none")
    parser.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    parser.add_argument(
        "--worker", nargs=3, metavar=("URL", "MODE", "SECONDS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.worker:
        url, mode, seconds = args.worker
        print(json.dumps(work(url, mode, float(seconds))))
        return 0
    rows = [
        measure(backend, mode, args.processes, args.seconds)
        for backend in args.backends.split(",")
        for mode in args.modes.split(",")
    ]
    if args.json:
        print(json.dumps({"processes": args.processes, "seconds": args.seconds, "results": rows}))
    else:
        print(f"{args.processes} processes x {args.seconds:g} s on one thread\n")
        print(table(rows))
        for message in sorted({m for r in rows for m in r["messages"]}):
            print(f"\nrefused with: {message}")
    return 0 if all(r["holds"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Inspector threads-list benchmark: how long does ``statekeeper ui`` take to list threads?

Builds ``--threads`` threads (default 10,000) on SQLite, each with ``--checkpoints``
checkpoints (default 4: an input and three steps, each storing a small ``messages``
list and the metadata a runner writes), then times, each the median of ``--samples``:

* ``page_threads``: the first page of 50 thread ids (``statekeeper.threads``), which the
  list pages through, read from the thread index (``Checkpointer.thread_heads``);
* ``GET /threads``: the first page rendered as HTML through the app, with each thread's
  status (``threads.summarize`` of its newest checkpoint);
* ``GET /api/threads``: the same as JSON;
* ``GET /threads?cursor=...``: a page from the middle of the list;
* ``GET /threads?q=...``: a search by thread id.

The target is 200 ms for the HTML page at 10,000 threads. This is a benchmark, not a
test: nothing is asserted about the numbers.

    .venv/bin/python benchmarks/ui_threads.py                  # 10,000 threads
    .venv/bin/python benchmarks/ui_threads.py --threads 1000 --json
"""

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

if importlib.util.find_spec("statekeeper") is None:  # not installed: use this checkout's src/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from starlette.testclient import TestClient

from statekeeper.checkpointers import open_checkpointer
from statekeeper.threads import page_threads
from statekeeper.ui import UIOptions, create_app

TOKEN = "benchmark"


def build(saver: Any, threads: int, checkpoints: int) -> None:
    """``threads`` threads of ``checkpoints`` checkpoints each, written as a runner would:
    a ``messages`` channel that grows by a question and an answer per step."""
    clock = 0
    for index in range(threads):
        thread_id = f"thread-{index:05d}"
        config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        version = None
        messages: list[Any] = []
        for step in range(-1, checkpoints - 1):
            clock += 1
            version = saver.get_next_version(version, None)
            messages = [*messages, HumanMessage(f"question {step}"), AIMessage(f"answer {step}")]
            checkpoint = empty_checkpoint()
            checkpoint["id"] = str(uuid6(clock_seq=clock))
            checkpoint["channel_values"] = {"messages": messages}
            checkpoint["channel_versions"] = {"messages": version}
            metadata = {
                "source": "input" if step < 0 else "loop",
                "step": step,
                "parents": {},
                "statekeeper_graph": "app.agents:graph",
            }
            config = saver.put(config, checkpoint, metadata, {"messages": version})


def median_ms(call: Callable[[], Any], samples: int) -> float:
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def measure(saver: Any, threads: int, samples: int) -> dict[str, float]:
    app = create_app(UIOptions(saver=saver, token=TOKEN))
    client = TestClient(app, base_url="http://127.0.0.1")
    client.get(f"/?token={TOKEN}")
    middle = f"thread-{threads // 2:05d}"
    cursor = page_threads(saver, limit=max(threads // 2, 1)).cursor or ""  # the middle

    def get(path: str, **params: str) -> None:
        response = client.get(path, params=params)
        assert response.status_code == 200, response.text[:300]

    return {
        "page_threads (first 50 ids)": median_ms(lambda: page_threads(saver, limit=50), samples),
        "GET /threads (first page, HTML)": median_ms(lambda: get("/threads"), samples),
        "GET /api/threads (first page, JSON)": median_ms(lambda: get("/api/threads"), samples),
        "GET /threads?cursor= (middle page)": median_ms(
            lambda: get("/threads", cursor=cursor), samples
        ),
        "GET /threads?q= (search by id)": median_ms(lambda: get("/threads", q=middle), samples),
        "GET /threads?status=done (a status)": median_ms(
            lambda: get("/threads", status="done"), samples
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=10_000)
    parser.add_argument("--checkpoints", type=int, default=4, help="per thread (default 4)")
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        open_checkpointer(f"sqlite:///{tmp}/state.db") as saver,
    ):
        started = time.perf_counter()
        build(saver, args.threads, args.checkpoints)
        built = time.perf_counter() - started
        results = measure(saver, args.threads, args.samples)
    if args.json:
        print(json.dumps({"threads": args.threads, "checkpoints": args.checkpoints, "ms": results}))
        return
    print(
        f"{args.threads:,} threads x {args.checkpoints} checkpoints on SQLite "
        f"(built in {built:.1f} s); median of {args.samples}:"
    )
    for name, ms in results.items():
        print(f"  {name:<40} {ms:9.1f} ms")


if __name__ == "__main__":
    main()

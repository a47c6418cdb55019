"""Thread growth benchmark: does reading a thread cost more as its history grows?

For each size (default 10, 1,000 and 10,000 checkpoints) one thread is built with direct
``put`` + ``put_writes`` calls -- every checkpoint stores a new version of a small
``messages`` value (the last three messages, so values do not grow) and one pending write
-- then these reads are timed, each the median of ``--samples`` calls:

* ``get_tuple`` (latest): ``saver.get_tuple({"configurable": {"thread_id": ...}})``;
* ``list(limit=10)``: ``list(saver.list(config, limit=10))``, fully consumed;
* ``get_tuple`` (by id) and ``list(before=..., limit=10)`` for the checkpoint in the
  middle of the thread: the paths that look an id up instead of starting at the end.

The file store is built with ``fsync=false`` (building speed is not what is measured, and
reads do not depend on it); statekeeper's SQLite checkpointer is measured too, for scale.
This is a benchmark, not a test: nothing is asserted about the numbers.

    .venv/bin/python benchmarks/thread_growth.py                      # 10, 1000, 10000
    .venv/bin/python benchmarks/thread_growth.py --sizes 10,100 --savers file
"""

import argparse
import importlib.util
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

from statekeeper.checkpointers import open_checkpointer

SAVERS: dict[str, Callable[[Path], str]] = {
    "file": lambda tmp: f"file://{tmp}/files?fsync=false",
    "sqlite": lambda tmp: f"sqlite:///{tmp}/state.db",
}
THREAD = {"configurable": {"thread_id": "growing"}}


def build(saver: Any, size: int) -> list[dict[str, Any]]:
    """A thread of ``size`` checkpoints, each the child of the previous one."""
    parent: dict[str, Any] = {"configurable": {"thread_id": "growing", "checkpoint_ns": ""}}
    version = None
    configs = []
    for step in range(size):
        version = saver.get_next_version(version, None)
        messages = [HumanMessage(f"question {i}") for i in range(step, step + 2)]
        messages.append(AIMessage(f"answer {step} " * 20))
        checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid6(clock_seq=step))
        checkpoint["channel_values"] = {"messages": messages}
        checkpoint["channel_versions"] = {"messages": version}
        metadata = {"source": "loop", "step": step, "parents": {}}
        parent = saver.put(parent, checkpoint, metadata, {"messages": version})
        saver.put_writes(parent, [("messages", [AIMessage(f"pending {step}")])], f"task-{step}")
        configs.append(parent)
        if (step + 1) % 1000 == 0:
            print(f"  built {step + 1}/{size}", file=sys.stderr, flush=True)
    return configs


def median_ms(fn: Callable[[], object], samples: int) -> float:
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def measure(name: str, size: int, samples: int) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="statekeeper-growth-") as tmp,
        open_checkpointer(SAVERS[name](Path(tmp))) as saver,
    ):
        print(f"[{name}] building {size} checkpoints", file=sys.stderr, flush=True)
        middle = build(saver, size)[size // 2]
        return {
            "saver": name,
            "checkpoints": size,
            "get_tuple ms": median_ms(lambda: saver.get_tuple(THREAD), samples),
            "list(limit=10) ms": median_ms(lambda: list(saver.list(THREAD, limit=10)), samples),
            "get_tuple(middle) ms": median_ms(lambda: saver.get_tuple(middle), samples),
            "list(before=middle, limit=10) ms": median_ms(
                lambda: list(saver.list(THREAD, before=middle, limit=10)), samples
            ),
        }


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,1000,10000", help="checkpoints per thread")
    parser.add_argument("--savers", default="file,sqlite", help=f"from {','.join(SAVERS)}")
    parser.add_argument("--samples", type=int, default=50, help="calls per median (50)")
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    names = [name.strip() for name in args.savers.split(",") if name.strip()]
    if unknown := sorted(set(names) - set(SAVERS)):
        parser.error(f"unknown saver(s) {', '.join(unknown)}; choose from {', '.join(SAVERS)}")
    rows = [measure(name, size, args.samples) for name in names for size in sizes]
    columns = list(rows[0])
    print("| " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * (len(columns) - 1))
    for row in rows:
        cells = [_cell(v) for v in row.values()]
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

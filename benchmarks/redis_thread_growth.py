"""How the Redis checkpointer's costs grow with the size of a thread.

One thread is grown to 10, 1,000 and 10,000 checkpoints (each a child of the previous,
with two small channels of which one changes every step, and one pending write). At each
size it measures, on that thread:

* put: median ms of the last 50 (or 10) ``put`` + ``put_writes`` pairs to reach the size;
* latest: median ms of ``get_tuple`` without a checkpoint id (what a graph does per turn);
* by id: median ms of ``get_tuple`` of a checkpoint half-way down the thread;
* list(10): median ms of ``list(config, limit=10)``, fully consumed;
* list(None, 10): median ms of ``list(None, limit=10)`` with 20 other small threads;
* server us: Redis' own time per script call (``INFO commandstats``) for latest + list(10),
  which excludes the network and Python;
* copy / prune / delete: ms of ``copy_thread`` to a new thread, ``prune(keep_latest)`` of
  the copy, and ``delete_thread`` of the copy;
* bytes: the sum of ``MEMORY USAGE`` of the thread's keys (what Redis holds for it,
  including its overhead), and per checkpoint.

A benchmark, not a test: nothing is asserted. Run it with::

    .venv/bin/python benchmarks/redis_thread_growth.py
    .venv/bin/python benchmarks/redis_thread_growth.py --url redis://127.0.0.1:6379/0
    .venv/bin/python benchmarks/redis_thread_growth.py --url redis+cluster://127.0.0.1:7000

Keys are written under a fresh prefix (``bench-<hex>``) and deleted afterwards.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

if importlib.util.find_spec("statekeeper") is None:  # not installed: use this checkout's src/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import redis
import redis.cluster
from langgraph.checkpoint.base import empty_checkpoint

from statekeeper.checkpointers import open_checkpointer

SIZES = (10, 1_000, 10_000)
SAMPLES = 50


def timed_ms(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def median_ms(fn: Callable[[], object], samples: int = SAMPLES) -> float:
    return statistics.median(timed_ms(fn) for _ in range(samples))


class Thread:
    """A growing chain of checkpoints in one thread."""

    def __init__(self, saver: Any, thread_id: str) -> None:
        self.saver = saver
        self.thread_id = thread_id
        self.parent: dict[str, Any] = {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": ""}
        }
        self.version: Any = None
        self.steps = 0
        self.ids: list[str] = []

    def step(self) -> None:
        saver = self.saver
        self.version = saver.get_next_version(self.version, None)
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"step": self.steps, "note": f"note {self.steps} " * 20}
        versions = {"step": self.version, "note": self.version}
        checkpoint["channel_versions"] = versions
        metadata = {"source": "loop", "step": self.steps, "parents": {}}
        self.parent = saver.put(self.parent, checkpoint, metadata, versions)
        saver.put_writes(self.parent, [("step", self.steps)], f"task-{self.steps}")
        self.ids.append(checkpoint["id"])
        self.steps += 1


def admin_client(url: str) -> Any:
    base = url.split("?", 1)[0]
    if "+cluster" in base:
        host_port = base.split("://", 1)[1].split("/", 1)[0]
        host, port = host_port.rsplit(":", 1)
        return redis.cluster.RedisCluster(host=host, port=int(port))
    return redis.Redis.from_url(base)


def memory_bytes(admin: Any, saver: Any, thread_id: str) -> int:
    return sum(admin.memory_usage(key, samples=0) or 0 for key in saver._plans.keys(thread_id))


def script_usec(admin: Any, fn: Callable[[], object]) -> float:
    """Server-side microseconds per EVALSHA while running ``fn`` (standalone only)."""
    if isinstance(admin, redis.cluster.RedisCluster):
        return float("nan")
    admin.config_resetstat()
    fn()
    stats = admin.info("commandstats").get("cmdstat_evalsha")
    return float(stats["usec_per_call"]) if stats else float("nan")


def measure(url: str) -> list[dict[str, Any]]:
    prefix = f"bench-{uuid.uuid4().hex}"
    admin = admin_client(url)
    rows = []
    sep = "&" if "?" in url else "?"
    with open_checkpointer(f"{url}{sep}prefix={prefix}") as saver:
        try:
            for i in range(20):
                other = Thread(saver, f"other-{i}")
                other.step()
            thread = Thread(saver, "grown")
            config = {"configurable": {"thread_id": "grown", "checkpoint_ns": ""}}
            for size in SIZES:
                samples = min(SAMPLES, size)
                while thread.steps < size - samples:
                    thread.step()
                put_ms = median_ms(thread.step, samples)  # ends at exactly `size`
                middle = {"configurable": {**config["configurable"]}}
                middle["configurable"]["checkpoint_id"] = thread.ids[len(thread.ids) // 2]
                row = {
                    "checkpoints": thread.steps,
                    "put": put_ms,
                    "latest": median_ms(lambda: saver.get_tuple(config)),
                    "by id": median_ms(lambda: saver.get_tuple(middle)),  # noqa: B023
                    "list(10)": median_ms(lambda: list(saver.list(config, limit=10))),
                    "list(None, 10)": median_ms(lambda: list(saver.list(None, limit=10))),
                    "server us": script_usec(
                        admin,
                        lambda: [
                            (saver.get_tuple(config), list(saver.list(config, limit=10)))
                            for _ in range(SAMPLES)
                        ],
                    ),
                    "bytes": memory_bytes(admin, saver, "grown"),
                }
                row["bytes/checkpoint"] = row["bytes"] / thread.steps
                row["copy"] = timed_ms(lambda: saver.copy_thread("grown", "copy"))
                row["prune"] = timed_ms(lambda: saver.prune(["copy"], strategy="keep_latest"))
                row["delete"] = timed_ms(lambda: saver.delete_thread("copy"))
                rows.append(row)
                print(f"... {thread.steps} checkpoints measured", file=sys.stderr)
        finally:
            for thread_id in ["grown", "copy", *(f"other-{i}" for i in range(20))]:
                saver.delete_thread(thread_id)
            for key in admin.scan_iter(match=f"{prefix}*"):
                admin.unlink(key)
            admin.close()
    return rows


def markdown(rows: list[dict[str, Any]], url: str) -> str:
    columns = list(rows[0])
    lines = [
        f"Redis thread growth ({url.split('?')[0]}): ms unless noted",
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "---:|" * len(columns),
    ]
    for row in rows:
        cells = []
        for column in columns:
            value = row[column]
            if column in ("checkpoints", "bytes"):
                cells.append(f"{value:,}")
            elif column in ("server us", "bytes/checkpoint"):
                cells.append(f"{value:,.0f}")
            else:
                cells.append(f"{value:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0", help="a Redis URL")
    args = parser.parse_args(argv)
    print(markdown(measure(args.url), args.url))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a Redis-backed turn's time goes: the loopback floor, plus client CPU or server work.

Plays the chat workload of ``chat_workload.py`` (first turns of fresh threads, where a
saver's fixed cost per call weighs most) on LangGraph's ``InMemorySaver``, on statekeeper's
``RedisCheckpointer``, and on variants of the loopback floor: an ``InMemorySaver`` that
makes one round trip to Redis per ``get_tuple``, ``put`` and ``put_writes``,

* ``floor``: a bare ``PING``;
* ``floor + N us CPU``: a ``PING`` after a busy loop of N µs of the calling thread's CPU,
  as a stand-in for a client's work per call (encoding, a client library);
* ``floor + N us script``: an ``EVALSHA`` of a Lua loop that keeps the server busy for
  about N µs (calibrated from ``INFO commandstats``), as a stand-in for a write script.

All rows are interleaved turn by turn (in a rotating order), so machine load hits them
alike; the table gives the median ms of one ``invoke`` and its ratio to ``InMemorySaver``.
Nothing is asserted: it is a benchmark. Redis is ``$REDIS_URL`` (default the local
server); the floors write no key (their script only loops), and the ``RedisCheckpointer``
row writes under a fresh prefix that it deletes afterwards.

    .venv/bin/python benchmarks/redis_floor.py                  # 40 threads x 10 turns
    .venv/bin/python benchmarks/redis_floor.py --threads 10 --turns 5 --cpu 50 --script 50
"""

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import redis
from _chat import build_graph, human_text, thread_config
from _savers import RoundTripFloor, redis_url
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver

from statekeeper.checkpointers import open_checkpointer

BUSY_LOOP = "local x = 0 for i = 1, tonumber(ARGV[1]) do x = x + i end return 1"


def _command(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


class CpuFloor(RoundTripFloor):
    """The floor, with ``micros`` of busy CPU in the calling thread before each round trip."""

    def __init__(self, url: str, micros: int) -> None:
        super().__init__(url)
        self._seconds = micros / 1e6

    def _round_trip(self) -> None:
        end = time.thread_time() + self._seconds
        while time.thread_time() < end:
            pass
        super()._round_trip()


class ScriptFloor(RoundTripFloor):
    """The floor, with a server-side Lua loop of about ``micros`` instead of ``PING``."""

    def __init__(self, url: str, micros: int) -> None:
        super().__init__(url)
        client = redis.Redis.from_url(url)
        try:
            sha = client.script_load(BUSY_LOOP)
            self.server_micros, self.request = _calibrate(client, sha, micros)
        finally:
            client.close()
        self.expected = b":1\r\n"


def _calibrate(client: redis.Redis, sha: str, micros: int) -> tuple[float, bytes]:
    """Iterations of the loop that take about ``micros`` on the server: the measured µs
    per call, and the request to send."""

    def measured(iterations: int) -> float:  # µs per call, from the server's totals
        def totals() -> tuple[int, int]:
            stats = client.info("commandstats").get("cmdstat_evalsha", {})
            return int(stats.get("calls", 0)), int(stats.get("usec", 0))

        calls, usec = totals()
        for _ in range(200):
            client.evalsha(sha, 0, iterations)
        calls_after, usec_after = totals()
        return (usec_after - usec) / max(calls_after - calls, 1)

    iterations = 1000
    per_call = measured(iterations)
    for _ in range(2):  # scale to the target, measure again
        iterations = max(1, round(iterations * micros / max(per_call, 0.1)))
        per_call = measured(iterations)
    request = _command(b"EVALSHA", sha.encode(), b"0", str(iterations).encode())
    return per_call, request


@contextmanager
def open_redis_checkpointer(url: str) -> Iterator[BaseCheckpointSaver[Any]]:
    prefix = f"bench-{uuid.uuid4().hex}"
    client = redis.Redis.from_url(url)
    try:
        with open_checkpointer(url, prefix=prefix) as saver:
            yield saver
    finally:
        for key in client.scan_iter(match=f"{prefix}*", count=1000):
            client.unlink(key)
        client.close()


def measure(
    savers: dict[str, BaseCheckpointSaver[Any]], threads: int, turns: int
) -> dict[str, float]:
    graphs = {name: build_graph(saver) for name, saver in savers.items()}
    names = list(graphs)
    times: dict[str, list[float]] = {name: [] for name in names}
    for name in names:  # warm up: imports, connections, scripts
        graphs[name].invoke({"messages": [HumanMessage("hello")]}, thread_config("warm-up"))
    for t in range(threads):
        configs = {name: thread_config(f"thread-{uuid.uuid4().hex}") for name in names}
        for turn in range(turns):
            shift = (t * turns + turn) % len(names)
            for name in names[shift:] + names[:shift]:
                turn_input = {"messages": [HumanMessage(human_text(t, turn))]}
                start = time.perf_counter()
                graphs[name].invoke(turn_input, configs[name])
                times[name].append((time.perf_counter() - start) * 1000)
        print(f"thread {t + 1}/{threads}", file=sys.stderr, flush=True)
    return {name: statistics.median(samples) for name, samples in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=40, help="fresh threads (default 40)")
    parser.add_argument("--turns", type=int, default=10, help="turns per thread (default 10)")
    parser.add_argument(
        "--cpu", type=int, nargs="*", default=[50, 100, 150], help="µs of client CPU per call"
    )
    parser.add_argument(
        "--script", type=int, nargs="*", default=[35, 60], help="µs of server script per call"
    )
    args = parser.parse_args(argv)
    if args.threads < 1 or args.turns < 1:
        parser.error("--threads and --turns must be >= 1")
    url = redis_url()
    with ExitStack() as stack:
        savers: dict[str, BaseCheckpointSaver[Any]] = {"InMemorySaver": InMemorySaver()}
        floors: list[RoundTripFloor] = [RoundTripFloor(url)]
        labels = ["floor"]
        for micros in args.cpu:
            floors.append(CpuFloor(url, micros))
            labels.append(f"floor + {micros} us CPU")
        for micros in args.script:
            floor = ScriptFloor(url, micros)
            floors.append(floor)
            labels.append(f"floor + {micros} us script (measured {floor.server_micros:.0f})")
        for label, floor in zip(labels, floors, strict=True):
            stack.callback(floor.close)
            savers[label] = floor
        savers["RedisCheckpointer"] = stack.enter_context(open_redis_checkpointer(url))
        medians = measure(savers, args.threads, args.turns)
    base = medians["InMemorySaver"]
    print(f"Turns 1-{args.turns} of {args.threads} fresh threads, interleaved\n")
    print("| saver | median turn ms | / InMemorySaver |")
    print("|---|---:|---:|")
    for name, ms in medians.items():
        print(f"| {name} | {ms:.2f} | {ms / base:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The thread that serves the async API's calls in batches: every caller gets its own
result or error, in the order the calls came; a bug in a batch never strands a caller;
the thread leaves when idle, comes back when needed, restarts in a forked child and
finishes what is queued on close."""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from typing import Any

import pytest

from statekeeper._storage.worker import IDLE_SECONDS, MAX_BATCH, BatchWorker, Job, run_each


class Closed(Exception):
    pass


def _worker(serve: Any = run_each) -> BatchWorker:
    return BatchWorker("test-worker", serve, lambda: Closed("closed"))


def test_each_caller_gets_its_own_result_or_error_in_order() -> None:
    worker = _worker()
    ran: list[int] = []

    def task(n: int) -> Any:
        ran.append(n)
        if n % 3 == 0:
            raise ValueError(n)
        return n * 10

    async def main() -> list[Any]:
        calls = [worker.submit(lambda n=n: task(n)) for n in range(1, 100)]
        return await asyncio.gather(*calls, return_exceptions=True)

    results = asyncio.run(main())
    worker.close()
    assert ran == list(range(1, 100))
    for n, result in zip(range(1, 100), results, strict=True):
        if n % 3 == 0:
            assert isinstance(result, ValueError)
            assert result.args == (n,)
        else:
            assert result == n * 10


def test_jobs_waiting_together_are_served_as_one_batch() -> None:
    batches: list[int] = []
    gate = threading.Event()

    def serve(batch: list[Job]) -> None:
        gate.wait()
        batches.append(len(batch))
        run_each(batch)

    worker = _worker(serve)

    async def main() -> None:
        first = asyncio.ensure_future(worker.submit(lambda: 0))
        await asyncio.sleep(0.2)  # its batch waits at the gate: what comes next queues
        calls = [asyncio.ensure_future(worker.submit(lambda: 1)) for _ in range(MAX_BATCH + 6)]
        await asyncio.sleep(0.2)
        gate.set()
        assert await first == 0
        assert await asyncio.gather(*calls) == [1] * (MAX_BATCH + 6)

    asyncio.run(main())
    worker.close()
    assert batches == [1, MAX_BATCH, 6]  # the queue is served in batches of at most the cap


def test_a_failing_serve_raises_in_every_caller_of_its_batch_and_the_worker_goes_on() -> None:
    calls = 0

    def serve(batch: list[Job]) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("bug")
        run_each(batch)

    worker = _worker(serve)

    async def main() -> None:
        with pytest.raises(RuntimeError, match="bug"):
            await worker.submit(lambda: 1)
        assert await worker.submit(lambda: 2) == 2

    asyncio.run(main())
    worker.close()


def test_close_finishes_what_is_queued_then_refuses() -> None:
    gate = threading.Event()
    worker = _worker()

    async def main() -> None:
        first = asyncio.ensure_future(worker.submit(gate.wait))
        rest = [asyncio.ensure_future(worker.submit(lambda n=n: n)) for n in range(5)]
        await asyncio.sleep(0.1)
        closer = threading.Thread(target=worker.close)
        closer.start()
        await asyncio.sleep(0.1)
        assert closer.is_alive()  # it waits for the queue
        gate.set()
        assert await first is True
        assert await asyncio.gather(*rest) == list(range(5))
        closer.join()
        with pytest.raises(Closed):
            await worker.submit(lambda: 1)

    asyncio.run(main())
    worker.close()  # idempotent


def test_callers_on_several_event_loops_each_get_their_answers() -> None:
    worker = _worker()
    results: dict[int, list[int]] = {}

    def loop(n: int) -> None:
        async def main() -> list[int]:
            return list(
                await asyncio.gather(*(worker.submit(lambda i=i: n + i) for i in range(20)))
            )

        results[n] = asyncio.run(main())

    threads = [threading.Thread(target=loop, args=(n * 100,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    worker.close()
    assert results == {n * 100: [n * 100 + i for i in range(20)] for n in range(4)}


def test_the_thread_leaves_when_idle_and_comes_back() -> None:
    worker = _worker()
    assert asyncio.run(worker.submit(lambda: 1)) == 1
    thread = worker.thread
    assert thread is not None
    thread.join(timeout=IDLE_SECONDS * 10)
    assert not thread.is_alive()
    assert worker.thread is None
    assert asyncio.run(worker.submit(lambda: 2)) == 2
    worker.close()


def _in_child(worker: BatchWorker, out: Any) -> None:
    out.put(asyncio.run(worker.submit(lambda: "child")))


def test_a_forked_child_gets_a_thread_of_its_own() -> None:
    worker = _worker()
    assert asyncio.run(worker.submit(lambda: "parent")) == "parent"  # the thread is up
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_in_child, args=(worker, out))
    child.start()
    assert out.get(timeout=30) == "child"
    child.join(timeout=30)
    assert child.exitcode == 0
    worker.close()

"""``run_exclusive`` / ``arun_exclusive``: one run per thread, on every backend.

Concurrent runs of the counter graph (tests/graphs/counter_graph.py), whose node reads
the count and writes it plus one: with ``"enqueue"`` every increment is in the final
state; with ``"reject"`` the refused runs raise ``ThreadBusyError`` and nothing of theirs
is stored. The quick tests race threads of this process, each with its own checkpointer
(for ``memory://``, the one there is); the slow ones race processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from statekeeper.checkpointers import open_checkpointer
from statekeeper.errors import ConfigurationError, ThreadBusyError
from statekeeper.graphs import arun_exclusive, run_exclusive
from tests.conftest import Backend
from tests.graphs import counter_graph
from tests.graphs.counter_graph import THREAD, config

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINTS_PER_RUN = 3  # the input, the start step, the increment

Outcome = tuple[str, str, str]  # ("ok" | "refused", run, message)


def in_threads(backend: Backend, url: str, saver: Any, strategy: str, n: int) -> list[Outcome]:
    """Three threads, each making ``n`` exclusive runs with its own checkpointer."""
    found: list[Outcome] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            if backend.persistent:
                with open_checkpointer(url) as own:
                    found.extend(counter_graph.runs(own, strategy, n))
            else:
                found.extend(counter_graph.runs(saver, strategy, n))
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)

    workers = [threading.Thread(target=work) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert not errors, errors
    return found


def in_processes(url: str, strategy: str, n: int, processes: int = 3) -> list[Outcome]:
    """``processes`` worker processes, each making ``n`` exclusive runs."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.graphs.counter_graph", url, strategy, str(n)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    for child in children:  # all ready (imported, storage open) before any starts
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n", child.communicate(timeout=60)[1]
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    found: list[Outcome] = []
    for child in children:
        out, err = child.communicate(timeout=180)
        assert child.returncode == 0, err
        for line in out.splitlines():
            outcome, run, message = [*line.split(" ", 2), ""][:3]
            found.append((outcome, run, message))
    return found


def stored(saver: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The thread's newest state and the metadata of all its checkpoints."""
    tup = saver.get_tuple({"configurable": {"thread_id": THREAD}})
    values = tup.checkpoint["channel_values"] if tup else {}
    metadata = [t.metadata for t in saver.list({"configurable": {"thread_id": THREAD}})]
    return values, metadata


def check_enqueued(saver: Any, outcomes: list[Outcome], expected_runs: int) -> None:
    assert len(outcomes) == expected_runs
    assert {outcome for outcome, _, _ in outcomes} == {"ok"}
    values, metadata = stored(saver)
    assert values["count"] == expected_runs  # no increment lost
    assert sorted(values["runs"]) == sorted(run for _, run, _ in outcomes)
    assert len(metadata) == CHECKPOINTS_PER_RUN * expected_runs


def check_rejected(saver: Any, outcomes: list[Outcome], attempts: int) -> None:
    assert len(outcomes) == attempts
    done = [run for outcome, run, _ in outcomes if outcome == "ok"]
    refused = [(run, message) for outcome, run, message in outcomes if outcome == "refused"]
    assert done, "no run got the thread"
    assert refused, "no run was refused: the runs did not overlap"
    for _, message in refused:
        assert f"thread {THREAD!r} is being run by another process" in message
    values, metadata = stored(saver)
    assert values["count"] == len(done)
    assert sorted(values["runs"]) == sorted(done)
    # nothing at all is stored for a refused run
    assert len(metadata) == CHECKPOINTS_PER_RUN * len(done)
    assert {m["run"] for m in metadata} == set(done)


def test_enqueued_runs_of_one_thread_keep_every_increment(
    backend: Backend, url: str, saver: Any
) -> None:
    outcomes = in_threads(backend, url, saver, "enqueue", 4)
    check_enqueued(saver, outcomes, 12)


def test_rejected_runs_raise_thread_busy_and_store_nothing(
    backend: Backend, url: str, saver: Any
) -> None:
    outcomes = in_threads(backend, url, saver, "reject", 5)
    check_rejected(saver, outcomes, 15)


@pytest.mark.slow
def test_enqueued_runs_in_processes_keep_every_increment(
    backend: Backend, url: str, saver: Any
) -> None:
    if not backend.persistent:
        pytest.skip("memory:// storage lives in one process")
    check_enqueued(saver, in_processes(url, "enqueue", 4), 12)


@pytest.mark.slow
def test_rejected_runs_in_processes_store_nothing(backend: Backend, url: str, saver: Any) -> None:
    if not backend.persistent:
        pytest.skip("memory:// storage lives in one process")
    check_rejected(saver, in_processes(url, "reject", 6), 18)


@contextlib.contextmanager
def held_elsewhere(backend: Backend, url: str, saver: Any) -> Iterator[threading.Event]:
    """The thread's claim held by another thread (with its own checkpointer, when the
    storage has more than one) until the event yielded is set."""
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with contextlib.ExitStack() as stack:
            own = stack.enter_context(open_checkpointer(url)) if backend.persistent else saver
            with own.claim_thread(THREAD):
                taken.set()
                release.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    assert taken.wait(30), "the holder did not get the claim"
    try:
        yield release
    finally:
        release.set()
        holder.join(60)


def test_a_held_thread_is_refused_or_waited_for(backend: Backend, url: str, saver: Any) -> None:
    graph = counter_graph.graph.compile(checkpointer=saver)
    with held_elsewhere(backend, url, saver) as release:
        with pytest.raises(ThreadBusyError, match="being run by another process") as refused:
            run_exclusive(graph, {"runs": ["r"]}, config("r"))
        assert refused.value.thread_id == THREAD
        assert refused.value.holder["pid"] == os.getpid()
        with pytest.raises(ThreadBusyError, match=r"\(waited 0.2 s\)"):
            run_exclusive(graph, {"runs": ["e"]}, config("e"), multitask="enqueue", timeout=0.2)
        assert stored(saver) == ({}, [])  # nothing written for either
        threading.Timer(0.3, release.set).start()
        result = run_exclusive(graph, {"runs": ["w"]}, config("w"), multitask="enqueue")
    assert result == {"count": 1, "runs": ["w"]}


async def test_arun_exclusive_enqueues_coroutines_and_refuses_with_reject(saver: Any) -> None:
    graph = counter_graph.graph.compile(checkpointer=saver)
    names = [uuid.uuid4().hex for _ in range(5)]
    await asyncio.gather(
        *(arun_exclusive(graph, {"runs": [n]}, config(n), multitask="enqueue") for n in names)
    )
    values, metadata = stored(saver)
    assert values["count"] == 5
    assert sorted(values["runs"]) == sorted(names)
    async with saver.aclaim_thread(THREAD):
        with pytest.raises(ThreadBusyError):
            await arun_exclusive(graph, {"runs": ["x"]}, config("x"))
        with pytest.raises(ThreadBusyError, match="waited"):
            await arun_exclusive(
                graph, {"runs": ["y"]}, config("y"), multitask="enqueue", timeout=0.1
            )
    assert len(stored(saver)[1]) == len(metadata)


def test_bad_arguments_are_refused_before_anything_runs(saver: Any) -> None:
    graph = counter_graph.graph.compile(checkpointer=saver)
    with pytest.raises(ConfigurationError, match="statekeeper checkpointer"):
        run_exclusive(counter_graph.graph.compile(checkpointer=InMemorySaver()), {}, config("a"))
    with pytest.raises(ConfigurationError, match="thread_id"):
        run_exclusive(graph, {}, {"configurable": {}})
    with pytest.raises(ConfigurationError, match="multitask must be one of 'reject', 'enqueue'"):
        run_exclusive(graph, {}, config("a"), multitask="interrupt")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="timeout applies to multitask='enqueue'"):
        run_exclusive(graph, {}, config("a"), timeout=1)
    with pytest.raises(ConfigurationError, match="wait must be None"):
        run_exclusive(graph, {}, config("a"), multitask="enqueue", timeout=-1)
    assert stored(saver) == ({}, [])

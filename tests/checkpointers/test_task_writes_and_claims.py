"""``Checkpointer.get_writes`` and ``Checkpointer.claim_thread``, run against every backend.

``get_writes`` must return exactly what ``get_tuple`` returns as ``pending_writes``, in the
same order, plus each write's ``task_path`` (which drives that order). ``claim_thread`` must
be exclusive between savers of one URL, in this process and in others, and must not outlive
a holder that was killed: the kernel drops a lock file's lock, Redis expires the claim.
``memory://`` storage lives in one saver, so its claims are exercised through that saver
from another Python thread, and the cross-process cases do not apply to it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import WRITES_IDX_MAP, writes_sort_key
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT, RESUME, SCHEDULED
from langgraph.types import Interrupt

from statekeeper.checkpointers import open_checkpointer
from statekeeper.checkpointers.base import TaskWrite
from statekeeper.errors import ConfigurationError, InvalidIdError, ThreadBusyError
from tests.checkpointers.test_contract import ODD_IDS, cfg, cp_id, put, strict, writes_of
from tests.conftest import Backend

ROOT = Path(__file__).resolve().parents[2]
CLAIM_TTL = 1.0  # seconds a Redis claim outlives a holder that stopped renewing it

# --------------------------------------------------------------------------------------------
# get_writes
# --------------------------------------------------------------------------------------------

# (task_id, task_path, writes) in the order they are stored. Task ids sort one way, task
# paths another, and the storing order is neither: only the paths explain the result.
TASKS: list[tuple[str, str, list[tuple[str, Any]]]] = [
    ("task-a", "~__pregel_push, 2, ~__pregel_pull, zeta", [("log", "a0"), ("count", 1)]),
    ("task-b", "~__pregel_pull, omega", [("log", b"b0\x00"), (ERROR, "ValueError('boom')")]),
    ("task-c", "~__pregel_pull, alpha", [("log", {"c": [None, True, 1.5]})]),
    ("task-d", "~__pregel_push, 0, ~__pregel_pull, mid", [(SCHEDULED, None), ("log", "d0")]),
    ("task-e", "", [(INTERRUPT, [Interrupt(value={"ask": "ok?"}, id="i-1")]), ("count", 2)]),
    ("task-f", "~__pregel_pull, alpha", [(RESUME, "yes"), ("log", "f0"), ("log", "f1")]),
]
# task ids in the order get_writes must return their writes: by path, then by id
TASK_ORDER = ["task-e", "task-c", "task-f", "task-b", "task-d", "task-a"]


def expected_writes(tasks: list[tuple[str, str, list[tuple[str, Any]]]]) -> list[TaskWrite]:
    """``writes_sort_key`` order, with the special channels at their fixed indexes."""
    rows = [
        (
            writes_sort_key(path, task_id, WRITES_IDX_MAP.get(channel, idx)),
            TaskWrite(task_id, path, channel, value),
        )
        for task_id, path, writes in tasks
        for idx, (channel, value) in enumerate(writes)
    ]
    return [write for _, write in sorted(rows, key=lambda row: row[0])]


def store_tasks(saver: Any, config: Any, tasks: list[tuple[str, str, list[Any]]]) -> None:
    for task_id, path, writes in tasks:
        saver.put_writes(config, writes, task_id, path)


def test_get_writes_matches_pending_writes_with_task_paths_in_path_order(saver: Any) -> None:
    config = put(saver, "t", values={"log": "x"})
    store_tasks(saver, config, TASKS)

    got = saver.get_writes(config)

    assert all(isinstance(w, TaskWrite) for w in got)
    assert strict([tuple(w) for w in got]) == strict([tuple(w) for w in expected_writes(TASKS)])
    assert list(dict.fromkeys(w.task_id for w in got)) == TASK_ORDER
    pending = [(w.task_id, w.channel, w.value) for w in got]
    assert strict(pending) == strict(writes_of(saver.get_tuple(config)))
    assert strict(pending) == strict(writes_of(next(iter(saver.list(cfg("t"))))))


def test_get_writes_keeps_each_checkpoint_and_namespace_apart(saver: Any) -> None:
    root = put(saver, "t", values={"log": "r"})
    child = put(saver, "t", parent=root, values={"log": "c"})
    sub = put(saver, "t", ns="sub:1", values={"log": "s"})
    store_tasks(saver, root, TASKS[:2])
    store_tasks(saver, child, TASKS[2:4])
    store_tasks(saver, sub, TASKS[4:])

    for config, tasks in ((root, TASKS[:2]), (child, TASKS[2:4]), (sub, TASKS[4:])):
        got = saver.get_writes(config)
        assert strict([tuple(w) for w in got]) == strict([tuple(w) for w in expected_writes(tasks)])
        assert strict([(w.task_id, w.channel, w.value) for w in got]) == strict(
            writes_of(saver.get_tuple(config))
        )


def test_get_writes_keeps_the_first_regular_write_and_the_newest_special_one(
    saver: Any,
) -> None:
    config = put(saver, "t")
    saver.put_writes(config, [("log", "first"), (ERROR, "old")], "task", "~p, n")
    saver.put_writes(config, [("log", "second"), (ERROR, "new")], "task", "~p, n")

    assert saver.get_writes(config) == [
        TaskWrite("task", "~p, n", ERROR, "new"),
        TaskWrite("task", "~p, n", "log", "first"),
    ]


def test_get_writes_of_a_checkpoint_without_writes_or_unknown_is_empty(saver: Any) -> None:
    config = put(saver, "t")
    saver.put_writes(config, [("log", "x")], "task", "p")

    assert saver.get_writes(put(saver, "t", parent=config)) == []
    assert saver.get_writes(cfg("t", "", "1f000000-0000-6000-8000-000000000000")) == []
    assert saver.get_writes(cfg("t", "no-such-ns", cp_id(config))) == []
    assert saver.get_writes(cfg("no-such-thread", "", cp_id(config))) == []


def test_get_writes_without_a_checkpoint_id_raises_configuration_error(saver: Any) -> None:
    put(saver, "t")

    with pytest.raises(ConfigurationError, match="checkpoint_id"):
        saver.get_writes(cfg("t"))
    with pytest.raises(ConfigurationError, match="thread_id"):
        saver.get_writes({"configurable": {"checkpoint_id": "x"}})


HOSTILE_IDS = [i for i in ODD_IDS if len(i) < 100] + ["x" * 10_000]


def test_get_writes_with_hostile_ids_round_trips_each_exactly_and_apart(saver: Any) -> None:
    stored = {}
    for tid in HOSTILE_IDS:
        stored[tid] = put(saver, tid, ns=tid, values={"who": tid})
        saver.put_writes(stored[tid], [("who", tid)], tid, tid)

    for tid in HOSTILE_IDS:
        assert saver.get_writes(stored[tid]) == [TaskWrite(tid, tid, "who", tid)], tid[:20]
        wrong_ns = cfg(tid, "", cp_id(stored[tid]))
        assert saver.get_writes(wrong_ns) == [], tid[:20]


@pytest.mark.parametrize(
    "where",
    [
        pytest.param({"thread_id": "\ud800"}, id="thread-id"),
        pytest.param({"checkpoint_ns": "a\udfff"}, id="namespace"),
        pytest.param({"checkpoint_id": "\ud800"}, id="checkpoint-id"),
        pytest.param({"thread_id": ""}, id="empty-thread-id"),
    ],
)
def test_get_writes_with_unstorable_ids_raises_invalid_id_error(
    saver: Any, where: dict[str, str]
) -> None:
    config = put(saver, "t")
    configurable = {**config["configurable"], **where}

    with pytest.raises(InvalidIdError):
        saver.get_writes({"configurable": configurable})


async def test_get_writes_sees_writes_stored_through_the_async_api(saver: Any) -> None:
    config = put(saver, "t")
    for task_id, path, writes in TASKS:
        await saver.aput_writes(config, writes, task_id, path)

    assert strict([tuple(w) for w in saver.get_writes(config)]) == strict(
        [tuple(w) for w in expected_writes(TASKS)]
    )


# --------------------------------------------------------------------------------------------
# claim_thread
# --------------------------------------------------------------------------------------------


def claim_options(backend: Backend) -> dict[str, Any]:
    """Redis claims expire unless renewed; a short TTL lets a test outwait a dead holder."""
    return {"claim_ttl": CLAIM_TTL} if backend.name.startswith("redis") else {}


@pytest.fixture
def claimer(backend: Backend, url: str) -> Iterator[Any]:
    with open_checkpointer(url, **claim_options(backend)) as opened:
        yield opened


@contextlib.contextmanager
def rival(backend: Backend, url: str, claimer: Any) -> Iterator[Any]:
    """Another saver of the same storage (for ``memory://``, the one saver there is)."""
    if not backend.persistent:
        yield claimer
        return
    with open_checkpointer(url, **claim_options(backend)) as other:
        yield other


def claim_in_other_thread(saver: Any, thread_id: str) -> BaseException | None:
    """Try ``saver.claim_thread(thread_id)`` from another Python thread; its error or None."""
    outcome: list[BaseException | None] = []

    def attempt() -> None:
        try:
            with saver.claim_thread(thread_id):
                outcome.append(None)
        except BaseException as exc:  # handed to the test thread
            outcome.append(exc)

    worker = threading.Thread(target=attempt)
    worker.start()
    worker.join(30)
    assert outcome, "the claim attempt hung"
    return outcome[0]


def test_a_second_claim_on_a_held_thread_raises_thread_busy_naming_the_holder(
    backend: Backend, url: str, claimer: Any
) -> None:
    with rival(backend, url, claimer) as other:
        with claimer.claim_thread("t 🧵"):
            refused = claim_in_other_thread(other, "t 🧵")
            assert isinstance(refused, ThreadBusyError), refused
            assert refused.thread_id == "t 🧵"
            assert refused.holder["pid"] == os.getpid()
            assert "t 🧵" in str(refused)

        assert claim_in_other_thread(other, "t 🧵") is None
        with other.claim_thread("t 🧵"):
            assert isinstance(claim_in_other_thread(claimer, "t 🧵"), ThreadBusyError)
        with claimer.claim_thread("t 🧵"):
            pass


def test_claims_on_different_threads_do_not_conflict(
    backend: Backend, url: str, claimer: Any
) -> None:
    with rival(backend, url, claimer) as other, claimer.claim_thread("a"):
        with other.claim_thread("b"), claimer.claim_thread("../a"):
            assert isinstance(claim_in_other_thread(other, "a"), ThreadBusyError)
        assert claim_in_other_thread(other, "b") is None
        assert claim_in_other_thread(other, "x" * 10_000) is None


def test_a_claim_is_released_when_its_block_raises(claimer: Any) -> None:
    with pytest.raises(RuntimeError), claimer.claim_thread("t"):
        raise RuntimeError("the run failed")

    assert claim_in_other_thread(claimer, "t") is None


@pytest.mark.parametrize("bad", ["", "\ud800"])
def test_claiming_an_unstorable_thread_id_raises_invalid_id_error(claimer: Any, bad: str) -> None:
    with pytest.raises(InvalidIdError), claimer.claim_thread(bad):
        pass


HOLDER = """
import sys, time
from statekeeper.checkpointers import open_checkpointer
url, thread_id, ttl = sys.argv[1], sys.argv[2], sys.argv[3]
saver = open_checkpointer(url, **({"claim_ttl": float(ttl)} if ttl else {}))
with saver.claim_thread(thread_id):
    print("claimed", flush=True)
    time.sleep(120)
"""


@contextlib.contextmanager
def holder_process(backend: Backend, url: str, thread_id: str) -> Iterator[subprocess.Popen[str]]:
    """A child process holding the claim on ``thread_id`` until it is killed."""
    ttl = str(claim_options(backend).get("claim_ttl", ""))
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, url, thread_id, ttl],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "claimed", "the holder did not claim"
        yield child
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(30)


def claim_until_free(saver: Any, thread_id: str, timeout: float) -> None:
    """Claim (and release) ``thread_id``, retrying while it is busy, for ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with saver.claim_thread(thread_id):
                return
        except ThreadBusyError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_a_claim_held_by_another_process_is_refused_then_freed_when_it_is_killed(
    backend: Backend, url: str, claimer: Any
) -> None:
    if not backend.persistent:
        pytest.skip("memory:// storage lives in one process: no other process can claim it")
    with holder_process(backend, url, "shared") as child:
        with pytest.raises(ThreadBusyError) as refused, claimer.claim_thread("shared"):
            pass
        assert refused.value.thread_id == "shared"
        assert refused.value.holder["pid"] == child.pid
        with claimer.claim_thread("other"):
            pass

        child.send_signal(signal.SIGKILL)
        child.wait(30)

    # the kernel releases a lock at once; Redis lets the claim expire after its TTL
    claim_until_free(claimer, "shared", timeout=CLAIM_TTL + 10)
    with claimer.claim_thread("shared"):
        assert isinstance(claim_in_other_thread(claimer, "shared"), ThreadBusyError)

"""Several processes share ONE SQLite file without "database is locked".

Six processes start together on a file that does not exist yet, so they also race to
create it and migrate its schema:

* ``graph`` on its own thread: a real two-node graph, one ``invoke`` per turn;
* ``direct`` on its own thread: ``put`` + ``put_writes`` of a chain of checkpoints;
* two ``graph`` workers on the SAME thread, interleaving their checkpoints;
* two readers (one sync, one async) listing every thread and loading what they list,
  round after round, until they have seen every checkpoint the writers will make.

Each process opens ``open_checkpointer(url)`` itself. Nothing here measures time: the
assertions are that every process exits 0, no process saw an error, and afterwards every
thread holds exactly the checkpoints its writers made, each of which loads.
"""

from __future__ import annotations

import asyncio
import json
import operator
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from statekeeper.checkpointers import open_checkpointer

ROOT = Path(__file__).resolve().parents[2]
TURNS = 30
OWN_THREAD = "thread-graph"
DIRECT_THREAD = "thread-direct"
SHARED_THREAD = "thread-shared"
THREADS = (OWN_THREAD, DIRECT_THREAD, SHARED_THREAD)
WRITES_PER_DIRECT_CHECKPOINT = 2


# -- the graph every "graph" worker runs -------------------------------------------------


class ChatState(TypedDict):
    log: Annotated[list[str], operator.add]


def think(state: ChatState) -> dict[str, Any]:
    return {"log": [state["log"][-1].replace(":user", ":think")]}


def reply(state: ChatState) -> dict[str, Any]:
    return {"log": [state["log"][-1].replace(":think", ":reply")]}


def build_graph(checkpointer: BaseCheckpointSaver[Any]) -> Any:
    builder = StateGraph(ChatState)
    builder.add_node("think", think)
    builder.add_node("reply", reply)
    builder.add_edge(START, "think")
    builder.add_edge("think", "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=checkpointer)


def checkpoints_per_invoke() -> int:
    """How many checkpoints one ``invoke`` writes (measured on InMemorySaver)."""
    saver = InMemorySaver()
    graph = build_graph(saver)
    config = {"configurable": {"thread_id": "probe"}}
    graph.invoke({"log": ["probe:0:user"]}, config)
    first = len(list(saver.list(config)))
    graph.invoke({"log": ["probe:1:user"]}, config)
    assert len(list(saver.list(config))) == 2 * first
    return first


def expected_counts() -> dict[str, int]:
    """Checkpoints per thread once every writer is done."""
    per_invoke = checkpoints_per_invoke()
    return {
        OWN_THREAD: TURNS * per_invoke,
        DIRECT_THREAD: TURNS,
        SHARED_THREAD: 2 * TURNS * per_invoke,
    }


# -- what each process does --------------------------------------------------------------


def run_graph_worker(saver: Any, name: str, thread_id: str, shared: bool) -> dict[str, Any]:
    graph = build_graph(saver)
    config = {"configurable": {"thread_id": thread_id}}
    for turn in range(TURNS):
        out = graph.invoke({"log": [f"{name}:{turn}:user"]}, config)
        assert out["log"][-3:] == [f"{name}:{turn}:{s}" for s in ("user", "think", "reply")]
        if not shared:  # nobody else writes here: the thread is exactly our turns
            assert len(graph.get_state(config).values["log"]) == 3 * (turn + 1)
    return {"turns": TURNS}


def run_direct_worker(saver: Any, name: str, thread_id: str) -> dict[str, Any]:
    parent: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    version = None
    log: list[str] = []
    for turn in range(TURNS):
        log = [*log, f"{name}:{turn}"]
        version = saver.get_next_version(version, None)
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"log": log}
        checkpoint["channel_versions"] = {"log": version}
        metadata = {"source": "loop", "step": turn, "parents": {}, "writer": name}
        saved = saver.put(parent, checkpoint, metadata, {"log": version})
        writes = [("log", f"{name}:{turn}:w{i}") for i in range(WRITES_PER_DIRECT_CHECKPOINT)]
        saver.put_writes(saved, writes, task_id=f"task-{turn}")
        loaded = saver.get_tuple(saved)
        assert loaded is not None
        assert loaded.checkpoint["id"] == checkpoint["id"]
        assert loaded.checkpoint["channel_values"] == {"log": log}
        assert [(c, v) for _, c, v in loaded.pending_writes or []] == writes
        if parent["configurable"].get("checkpoint_id"):
            assert loaded.parent_config is not None
            assert (
                loaded.parent_config["configurable"]["checkpoint_id"]
                == (parent["configurable"]["checkpoint_id"])
            )
        parent = saved
    return {"turns": TURNS}


def run_sync_reader(saver: Any) -> dict[str, Any]:
    expected = expected_counts()
    seen = dict.fromkeys(THREADS, 0)
    loaded = rounds = 0
    while seen != expected:  # ends when the writers are done (the test kills us otherwise)
        rounds += 1
        for thread_id in THREADS:
            tuples = list(saver.list({"configurable": {"thread_id": thread_id}}))
            # Checkpoints are only ever added: a later listing never shows fewer.
            assert seen[thread_id] <= len(tuples) <= expected[thread_id], (thread_id, seen)
            seen[thread_id] = len(tuples)
            for t in tuples[:2] + tuples[-2:]:
                got = saver.get_tuple(t.config)
                assert got is not None, t.config
                assert got.checkpoint["id"] == t.checkpoint["id"]
                loaded += 1
            if tuples:
                assert saver.get_tuple({"configurable": {"thread_id": thread_id}}) is not None
    return {"seen": seen, "loaded": loaded, "rounds": rounds}


async def run_async_reader(saver: Any) -> dict[str, Any]:
    expected = expected_counts()
    seen = dict.fromkeys(THREADS, 0)
    loaded = rounds = 0
    while seen != expected:
        rounds += 1
        for thread_id in THREADS:
            tuples = [t async for t in saver.alist({"configurable": {"thread_id": thread_id}})]
            assert seen[thread_id] <= len(tuples) <= expected[thread_id], (thread_id, seen)
            seen[thread_id] = len(tuples)
            for t in tuples[:2] + tuples[-2:]:
                got = await saver.aget_tuple(t.config)
                assert got is not None, t.config
                assert got.checkpoint["id"] == t.checkpoint["id"]
                loaded += 1
    return {"seen": seen, "loaded": loaded, "rounds": rounds}


def worker_main(role: str, name: str, url: str, thread_id: str) -> None:
    """Entry point of one process: wait for "go" on stdin, open the checkpointer, work."""
    sys.stdin.readline()  # every process is started and imported before any opens the file
    with open_checkpointer(url) as saver:
        if role == "graph":
            result = run_graph_worker(saver, name, thread_id, shared=thread_id == SHARED_THREAD)
        elif role == "direct":
            result = run_direct_worker(saver, name, thread_id)
        elif role == "sync-reader":
            result = run_sync_reader(saver)
        elif role == "async-reader":
            result = asyncio.run(run_async_reader(saver))
        else:
            raise ValueError(role)
    print(json.dumps({"name": name, **result}))


# -- the test ------------------------------------------------------------------------------

WORKERS = [
    # role, name, thread
    ("graph", "solo", OWN_THREAD),
    ("direct", "direct", DIRECT_THREAD),
    ("graph", "left", SHARED_THREAD),
    ("graph", "right", SHARED_THREAD),
    ("sync-reader", "reader-sync", ""),
    ("async-reader", "reader-async", ""),
]


@pytest.mark.slow
def test_processes_share_one_sqlite_file(tmp_path: Path) -> None:
    db = tmp_path / "shared" / "state.db"  # neither the file nor its directory exists yet
    url = f"sqlite:///{db}"
    assert url.startswith("sqlite:////")  # an absolute path
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        start_workers(procs, url, tmp_path)
        failures = wait_for_workers(procs, tmp_path)
        assert not failures, "\n".join(failures)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    reports = {}
    for name in procs:
        lines = (tmp_path / f"{name}.out").read_text().splitlines()
        reports[name] = json.loads(lines[-1])

    expected = expected_counts()
    assert expected[OWN_THREAD] == 4 * TURNS  # input, __start__, think, reply per turn
    with open_checkpointer(url) as saver:
        check_every_thread(saver, expected)
    for reader in ("reader-sync", "reader-async"):
        assert reports[reader]["seen"] == expected
        assert reports[reader]["loaded"] > 0


def start_workers(procs: dict[str, subprocess.Popen[str]], url: str, logs: Path) -> None:
    """Start every worker (into ``procs`` as it goes, so that the caller can kill what
    started if this fails), each writing its output and errors to ``logs``, then let
    them all go at once."""
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from tests.checkpointers.test_multiprocess import worker_main\n"
        "worker_main(*sys.argv[1:])\n"
    )
    for role, name, thread_id in WORKERS:
        with (logs / f"{name}.out").open("w") as out, (logs / f"{name}.err").open("w") as err:
            procs[name] = subprocess.Popen(
                [sys.executable, "-c", code, role, name, url, thread_id],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                text=True,
            )
    for proc in procs.values():  # start them all at once
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.close()


def wait_for_workers(procs: dict[str, subprocess.Popen[str]], logs: Path) -> list[str]:
    """Wait for every worker; what each that failed (exit status, a traceback or a
    "locked" error in its errors) wrote to its errors."""
    failures = []
    # Writers first: readers run until they have seen all the writers' checkpoints, so
    # if a writer failed they would never end.
    for role, name, _ in sorted(WORKERS, key=lambda w: "reader" in w[0]):
        proc = procs[name]
        if "reader" in role and failures:
            proc.kill()
        proc.wait(timeout=240)  # a guard against a hang, not a timing assertion
        stderr = (logs / f"{name}.err").read_text()
        if proc.returncode != 0 or "Traceback" in stderr or "locked" in stderr.lower():
            failures.append(f"--- {name} ({role}) exited {proc.returncode}:\n{stderr}")
    return failures


def check_every_thread(saver: Any, expected: dict[str, int]) -> None:
    """Every thread holds exactly the checkpoints its writers made, each loads as
    listed, and every parent is stored; no turn of any writer is lost."""
    for thread_id, count in expected.items():
        tuples = list(saver.list({"configurable": {"thread_id": thread_id}}))
        assert len(tuples) == count, thread_id
        ids = {t.checkpoint["id"] for t in tuples}
        assert len(ids) == count, f"duplicate checkpoint ids in {thread_id}"
        for t in tuples:
            loaded = saver.get_tuple(t.config)
            assert loaded is not None, t.config
            assert loaded.checkpoint == t.checkpoint
            assert loaded.metadata == t.metadata
            if loaded.parent_config is not None:  # every parent is stored too
                assert loaded.parent_config["configurable"]["checkpoint_id"] in ids

    own = saver.get_tuple({"configurable": {"thread_id": OWN_THREAD}})
    assert own is not None
    assert own.checkpoint["channel_values"]["log"] == [
        f"solo:{turn}:{s}" for turn in range(TURNS) for s in ("user", "think", "reply")
    ]

    for t in saver.list({"configurable": {"thread_id": DIRECT_THREAD}}):
        assert len(t.pending_writes or []) == WRITES_PER_DIRECT_CHECKPOINT

    # No turn of either shared-thread writer was lost: each reply is in some checkpoint.
    replies = set()
    for t in saver.list({"configurable": {"thread_id": SHARED_THREAD}}):
        replies.update(e for e in t.checkpoint["channel_values"].get("log", []) if "reply" in e)
    assert replies == {f"{w}:{turn}:reply" for w in ("left", "right") for turn in range(TURNS)}

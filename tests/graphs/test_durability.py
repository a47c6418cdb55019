"""LangGraph's durability modes (``durability="sync" | "async" | "exit"`` on ``invoke`` and
``stream``) on every backend.

What LangGraph does in each (langgraph/pregel/_loop.py, main.py): ``sync`` stores each
step's checkpoint before the next step starts; ``async`` (the default) stores it in a
background thread while the next step runs; ``exit`` stores nothing during the run
(neither checkpoints nor pending writes) and one checkpoint, with its pending writes,
when the graph exits: at its end, at an interrupt or at an error. So a process killed
during an ``async`` run loses at most what was not yet stored — the thread goes back to
its last stored checkpoint — and one killed during an ``exit`` run loses the whole run.

The checks: every mode ends in the state ``InMemorySaver`` ends in, with the same
checkpoints; ``sync`` has stored every earlier step when a node starts and ``exit``
nothing; a real SIGKILL during an ``async`` (or ``exit``) run leaves storage that
``verify()`` finds intact, a thread whose state is one the run went through (or, for
``exit``, nothing), and a resume that completes to the uninterrupted state.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from statekeeper.checkpointers import open_checkpointer
from tests.conftest import Backend
from tests.graphs import fanout_graph, steps_graph

ROOT = Path(__file__).resolve().parents[2]
MODES = ("sync", "async", "exit")
CONFIG = {"configurable": {"thread_id": "durable"}}


def run_fanout(saver: Any, mode: str) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    """The fan-out graph (Send, a subgraph, an interrupt) started, then resumed with the
    answer, both in ``mode``: its final state, and what each stored root checkpoint was
    (step, source, next nodes, values), newest first."""
    graph = fanout_graph.graph.compile(checkpointer=saver)
    first = graph.invoke(fanout_graph.INPUT, CONFIG, durability=mode)
    assert "__interrupt__" in first
    graph.invoke(Command(resume=fanout_graph.ANSWER), CONFIG, durability=mode)
    history = [
        (s.metadata["step"], s.metadata["source"], s.next, s.values)
        for s in graph.get_state_history(CONFIG)
    ]
    return graph.get_state(CONFIG).values, history


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_ends_in_the_state_and_checkpoints_of_in_memory_saver(
    saver: Any, mode: str
) -> None:
    expected_state, expected_history = run_fanout(InMemorySaver(), mode)
    assert expected_state["log"][-1] == "finish after prepare + approved yes"
    state, history = run_fanout(saver, mode)
    assert state == expected_state
    assert history == expected_history
    if mode == "exit":  # one checkpoint per invoke: at the interrupt, and at the end
        assert len(history) == 2


def test_sync_has_stored_every_earlier_step_when_a_node_starts_and_exit_nothing(
    saver: Any,
) -> None:
    seen: dict[str, list[int]] = {}

    def counting(mode: str) -> Any:
        """The steps graph whose nodes count the thread's checkpoints when they start."""
        builder = steps_graph.StateGraph(steps_graph.State)
        previous = steps_graph.START
        for name in steps_graph.STEPS:

            def node(state: Any, name: str = name) -> dict[str, Any]:
                seen[mode].append(len(list(saver.list({"configurable": {"thread_id": mode}}))))
                return {"log": [name]}

            builder.add_node(name, node)
            builder.add_edge(previous, name)
            previous = name
        return builder.compile(checkpointer=saver)

    for mode in ("sync", "exit"):
        seen[mode] = []
        config = {"configurable": {"thread_id": mode}}
        final = counting(mode).invoke({"log": []}, config, durability=mode)
        assert final["log"] == list(steps_graph.STEPS)
    # the input checkpoint, the one after __start__, then one per finished step
    assert seen["sync"] == [2, 3, 4, 5, 6, 7]
    assert len(list(saver.list({"configurable": {"thread_id": "sync"}}))) == 8
    assert seen["exit"] == [0] * len(steps_graph.STEPS)
    exit_checkpoints = list(saver.list({"configurable": {"thread_id": "exit"}}))
    assert len(exit_checkpoints) == 1
    assert exit_checkpoints[0].checkpoint["channel_values"]["log"] == list(steps_graph.STEPS)


def _killed_child(url: str, mode: str, where: str) -> None:
    child = subprocess.run(
        [sys.executable, "-m", "tests.graphs.steps_graph", url, mode, where],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
        capture_output=True,
        timeout=120,
    )
    assert child.returncode == -9, (where, child.stderr.decode())


# inside a node (async: the previous step's checkpoint may still be being stored), and
# inside the k-th write; an exit run makes one write, the checkpoint as it exits
KILLS = [
    *[("async", f"node:{step}") for step in ("s2", "s4", "s6")],
    *[("async", f"write:{k}") for k in (3, 6, 9)],
    ("exit", "node:s2"),
    ("exit", "node:s6"),
    ("exit", "write:1"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "where"), KILLS)
def test_a_sigkill_loses_at_most_the_unstored_steps_and_never_corrupts(
    backend: Backend, url: str, mode: str, where: str
) -> None:
    if not backend.persistent:
        pytest.skip("memory:// storage dies with its process: nothing to check")
    _killed_child(url, mode, where)
    full = list(steps_graph.STEPS)
    with open_checkpointer(url) as saver:
        assert saver.verify() == []
        graph = steps_graph.builder.compile(checkpointer=saver)
        stored = graph.get_state(steps_graph.THREAD)
        if mode == "exit":  # nothing is stored before the graph exits
            assert list(saver.list(steps_graph.THREAD)) == []
        log = stored.values.get("log", [])
        # a state the run went through: the steps before the kill, in order
        assert log == full[: len(log)]
        if where.startswith("node:"):
            assert len(log) < full.index(where.partition(":")[2]) + 1
        if stored.values:  # resume from the last stored checkpoint
            final = graph.invoke(None, steps_graph.THREAD, durability=mode)
        else:  # nothing stored: start over
            final = graph.invoke({"log": []}, steps_graph.THREAD, durability=mode)
        assert final["log"] == full
        assert graph.get_state(steps_graph.THREAD).next == ()
        assert saver.verify() == []

"""``statekeeper.threads``: a thread's next nodes and status read from storage alone agree
with what LangGraph computes from the graph, and its status says what ``resume`` would do:
a step whose writes are stored is pending, a subgraph's interrupt makes its parent wait, a
stored answer is not asked again, a claimed thread is running."""

from __future__ import annotations

import operator
import os
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from statekeeper.checkpointers import open_checkpointer
from statekeeper.graphs import Runner, load_graph
from statekeeper.threads import pending_nodes, summaries, summarize, thread_summary
from tests.graphs import fanout_graph
from tests.graphs.crashes import THREAD, Crash, Killed, crashing, drive

NULL_TASK_ID = "00000000-0000-0000-0000-000000000000"  # LangGraph's (private) input task


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def _node(name: str) -> Any:
    def run(state: State) -> dict[str, list[str]]:
        return {"log": [name]}

    return run


def _graph() -> StateGraph[State]:
    """START fans out to a and b; c waits for both a2 (after a) and b; then a Send
    fan-out to two copies of d."""
    builder = StateGraph(State)
    for name in ("a", "a2", "b", "c", "d"):
        builder.add_node(name, _node(name))
    builder.add_edge(START, "a")
    builder.add_edge(START, "b")
    builder.add_edge("a", "a2")
    builder.add_edge(["a2", "b"], "c")
    builder.add_conditional_edges("c", lambda _: [Send("d", {}), Send("d", {})])
    builder.add_edge("d", END)
    return builder


def test_next_nodes_from_storage_match_langgraph_at_every_checkpoint() -> None:
    with open_checkpointer("memory://") as saver:
        graph = _graph().compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "t"}}
        # "sync", as the runner runs: under "async" LangGraph may store a barrier's set
        # after the next step has already added to it
        graph.invoke({"log": []}, config, durability="sync")
        history = list(graph.get_state_history(config))
        assert len(history) == 6
        for snapshot in history:
            stored = saver.get_tuple(snapshot.config)
            expected = sorted(task.name for task in snapshot.tasks)
            assert sorted(pending_nodes(stored.checkpoint)) == expected, snapshot.metadata
        # the step where a and b ran left c's barrier half full: only a2 runs next
        after_ab = next(s for s in history if s.metadata["step"] == 1)
        assert after_ab.next == ("a2",)
        assert summarize(saver.get_tuple(history[0].config)).status == "done"


# -- the status of a thread, as the runner, `statekeeper threads` and inspectors see it --


def _killed_at(saver: Any, call: str, occurrence: int = 0) -> None:
    """Run the fan-out graph (start, then answer) on ``saver``, killed just before the
    ``occurrence``-th write named ``call`` (see tests/graphs/crashes.py)."""
    probe = Crash()
    with open_checkpointer("memory://") as scratch, crashing(scratch, probe):
        drive(Runner(scratch))
    at = [i for i, name in enumerate(probe.calls, 1) if name == call][occurrence]
    with crashing(saver, Crash(at)), pytest.raises(Killed):
        drive(Runner(saver))


def _status(saver: Any) -> tuple[str, tuple[str, ...], list[Any]]:
    summary = thread_summary(saver, THREAD)
    assert summary is not None
    return summary.status, summary.next, [i.value for i in summary.interrupts]


def test_a_parent_waiting_on_its_subgraphs_interrupt_is_interrupted() -> None:
    with open_checkpointer("memory://") as saver:
        Runner(saver).run(fanout_graph.REF, fanout_graph.INPUT, thread_id=THREAD)
        assert _status(saver) == ("interrupted", ("review",), [{"question": "approve?"}])


def test_a_subgraph_cut_short_leaves_its_parent_pending() -> None:
    with open_checkpointer("memory://") as saver:
        _killed_at(saver, "put_writes sub_log branch:to:ask")  # inside the subgraph
        assert _status(saver) == ("pending", ("review",), [])


def test_a_step_whose_writes_are_all_stored_is_pending_not_done() -> None:
    with open_checkpointer("memory://") as saver:
        # the three Send tasks stored their writes; the checkpoint after them was not
        _killed_at(saver, "put", occurrence=3)
        assert _status(saver) == ("pending", ("work", "work", "work"), [])
        # LangGraph's own snapshot lists nothing to run here
        graph = load_graph(fanout_graph.REF, saver)
        assert graph.get_state({"configurable": {"thread_id": THREAD}}).next == ()


def test_an_answer_stored_before_a_crash_is_not_asked_again() -> None:
    with open_checkpointer("memory://") as saver:
        _killed_at(saver, "put_writes __resume__ sub_log")  # the answer is stored
        assert _status(saver) == ("pending", ("review",), [])
        assert Runner(saver).resume(THREAD).status == "done"


def test_a_failed_task_makes_the_thread_failed() -> None:
    def boom(state: State) -> dict[str, Any]:
        raise RuntimeError("boom")

    builder = StateGraph(State)
    builder.add_node("a", _node("a"))
    builder.add_node("boom", boom)
    builder.add_edge(START, "a")
    builder.add_edge(START, "boom")
    with open_checkpointer("memory://") as saver:
        graph = builder.compile(checkpointer=saver)
        with pytest.raises(RuntimeError, match="boom"):
            graph.invoke({"log": []}, {"configurable": {"thread_id": THREAD}})
        status, next_nodes, interrupts = _status(saver)
        assert (status, sorted(next_nodes), interrupts) == ("failed", ["a", "boom"], [])


def test_a_claimed_thread_is_running_and_names_its_holder() -> None:
    with open_checkpointer("memory://") as saver:
        _graph().compile(checkpointer=saver).invoke(
            {"log": []}, {"configurable": {"thread_id": THREAD}}, durability="sync"
        )
        with saver.claim_thread(THREAD):
            summary = thread_summary(saver, THREAD)
            assert summary is not None
            assert summary.status == "running"
            assert summary.holder is not None
            assert summary.holder["pid"] == os.getpid()
            assert not summary.finished
            [listed] = summaries(saver)
            assert listed.status == "running"
        assert _status(saver) == ("done", (), [])
        assert thread_summary(saver, "nobody") is None


def test_a_command_stored_for_the_next_step_is_pending_work() -> None:
    with open_checkpointer("memory://") as saver:
        _graph().compile(checkpointer=saver).invoke(
            {"log": []}, {"configurable": {"thread_id": THREAD}}, durability="sync"
        )
        tup = saver.get_tuple({"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}})
        # what Command(goto="c") stores before its step runs
        saver.put_writes(tup.config, [("branch:to:c", None)], NULL_TASK_ID)
        assert _status(saver) == ("pending", ("c",), [])


def test_savers_without_claims_are_never_running() -> None:
    saver = InMemorySaver()
    _graph().compile(checkpointer=saver).invoke(
        {"log": []}, {"configurable": {"thread_id": THREAD}}, durability="sync"
    )
    assert _status(saver) == ("done", (), [])


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"metadata": "x"}, "metadata must be a mapping of str keys .*, got str 'x'$"),
        ({"metadata": [("team", "a")]}, "metadata must be a mapping of str keys"),
        ({"metadata": {1: "a"}}, "metadata must be a mapping of str keys"),
        ({"match": 5}, "match must be text to find in thread ids, got int 5$"),
        ({"status": 5}, "status must be one of running, .*, got int 5$"),
        ({"status": ["done", None]}, "unknown status None; use one of running"),
        ({"status": [["done"]]}, r"unknown status \['done'\]"),
        ({"limit": "3"}, "limit must be at least 1, got '3'$"),
        ({"limit": True}, "limit must be at least 1, got True$"),
    ],
)
def test_listing_arguments_of_the_wrong_type_are_refused_in_one_line(
    arguments: dict[str, Any], message: str
) -> None:
    from statekeeper.errors import ConfigurationError
    from statekeeper.threads import list_threads, page_threads

    with open_checkpointer("memory://") as saver:
        for listing in (list_threads, page_threads):
            with pytest.raises(ConfigurationError, match=message) as e:
                listing(saver, **arguments)
            assert "\n" not in str(e.value)
        with pytest.raises(ConfigurationError, match="after must be a thread id"):
            list_threads(saver, after=5)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="cursor 5 is not one a page"):
            page_threads(saver, cursor=5)  # type: ignore[arg-type]

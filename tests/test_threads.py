"""``statekeeper.threads``: a thread's next nodes and status read from storage alone agree
with what LangGraph computes from the graph."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from statekeeper.checkpointers import open_checkpointer
from statekeeper.threads import pending_nodes, summarize


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

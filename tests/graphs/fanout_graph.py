"""A graph with everything that makes resuming hard, loaded by reference
(``tests.graphs.fanout_graph:graph``) by the crash tests.

``plan`` fans out with ``Send`` to three ``work`` tasks that run in one super-step;
``review`` is a subgraph used as a node (its checkpoints live in a child namespace) whose
``ask`` node waits at an ``interrupt()``; ``finish`` runs last. Every node records itself
in ``log`` (or ``sub_log`` inside the subgraph), so the final state shows exactly which
node executions took effect, in order.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Send, interrupt

INPUT: dict[str, Any] = {"log": [], "items": [], "sub_log": []}
ANSWER = "yes"


class Review(TypedDict):
    sub_log: list[str]


class State(TypedDict):
    log: Annotated[list[str], operator.add]
    items: list[str]
    sub_log: list[str]


def plan(state: State) -> dict[str, Any]:
    return {"log": ["plan"], "items": ["x", "y", "z"]}


def fan_out(state: State) -> list[Send]:
    return [Send("work", {"item": item}) for item in state["items"]]


def work(packet: dict[str, str]) -> dict[str, Any]:
    return {"log": [f"work {packet['item']}"]}


def prepare(state: Review) -> dict[str, Any]:
    return {"sub_log": [*state["sub_log"], "prepare"]}


def ask(state: Review) -> dict[str, Any]:
    answer = interrupt({"question": "approve?"})
    return {"sub_log": [*state["sub_log"], f"approved {answer}"]}


def finish(state: State) -> dict[str, Any]:
    return {"log": [f"finish after {' + '.join(state['sub_log'])}"]}


def _review() -> Any:
    builder = StateGraph(Review)
    builder.add_node("prepare", prepare)
    builder.add_node("ask", ask)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "ask")
    builder.add_edge("ask", END)
    return builder.compile()


graph = StateGraph(State)
graph.add_node("plan", plan)
graph.add_node("work", work)
graph.add_node("review", _review())
graph.add_node("finish", finish)
graph.add_edge(START, "plan")
graph.add_conditional_edges("plan", fan_out, ["work"])
graph.add_edge("work", "review")
graph.add_edge("review", "finish")
graph.add_edge("finish", END)

REF = f"{__name__}:graph"

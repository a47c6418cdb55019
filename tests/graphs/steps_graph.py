"""A graph of six steps in a row, each recording itself in ``log``, that can kill its own
process: the durability tests' child processes run it (``python -m
tests.graphs.steps_graph URL MODE WHERE``) and SIGKILL themselves inside a node or inside
a write to the checkpointer.

``WHERE`` is ``node:NAME`` (the node kills the process when it starts) or ``write:K``
(the K-th call to ``put`` or ``put_writes`` kills it before storing anything; under
``async`` durability LangGraph makes those calls from its background threads while the
next step runs).
"""

from __future__ import annotations

import operator
import os
import signal
from typing import Annotated, Any, TypedDict

from langgraph.graph import START, StateGraph

STEPS = ("s1", "s2", "s3", "s4", "s5", "s6")
THREAD = {"configurable": {"thread_id": "steps"}}
kill_at: str | None = None  # a node that kills the process when it starts


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def _step(name: str) -> Any:
    def node(state: State) -> dict[str, Any]:
        if name == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return {"log": [name]}

    node.__name__ = name
    return node


builder = StateGraph(State)
previous = START
for step in STEPS:
    builder.add_node(step, _step(step))
    builder.add_edge(previous, step)
    previous = step


if __name__ == "__main__":
    import sys

    from statekeeper.checkpointers import open_checkpointer
    from tests.graphs.crashes import Crash, crashing

    url, mode, where = sys.argv[1:4]
    kind, _, at = where.partition(":")
    crash = Crash(int(at), sigkill=True) if kind == "write" else Crash()
    kill_at = at if kind == "node" else None
    with open_checkpointer(url) as saver, crashing(saver, crash):
        builder.compile(checkpointer=saver).invoke({"log": []}, THREAD, durability=mode)
    sys.exit("not killed")

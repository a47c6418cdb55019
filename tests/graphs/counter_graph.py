"""A one-node graph whose node reads the count and writes it plus one: two runs of one
thread at once lose an increment unless they are serialised. Each run's input names the
run in ``runs``; ``PAUSE`` seconds inside the node keep runs long enough to overlap.

Run as a script it is a worker: ``python -m tests.graphs.counter_graph URL STRATEGY N``
prints ``ready``, waits for a line on stdin (so that the workers start together), then
makes N runs of the thread ``shared`` with ``run_exclusive`` and prints one line per run:
``ok RUN`` or ``refused RUN MESSAGE``.
"""

from __future__ import annotations

import operator
import sys
import time
import uuid
from typing import Annotated, Any, TypedDict

from langgraph.graph import START, StateGraph

THREAD = "shared"
PAUSE = 0.02


class Count(TypedDict, total=False):
    count: int
    runs: Annotated[list[str], operator.add]


def increment(state: Count) -> dict[str, Any]:
    count = state.get("count", 0)
    time.sleep(PAUSE)
    return {"count": count + 1}


graph = StateGraph(Count)
graph.add_node("increment", increment)
graph.add_edge(START, "increment")


def config(run: str) -> dict[str, Any]:
    """The config of one run: the shared thread, the run's name in every checkpoint."""
    return {"configurable": {"thread_id": THREAD}, "metadata": {"run": run}}


def runs(saver: Any, strategy: str, n: int) -> list[tuple[str, str, str]]:
    """Make ``n`` exclusive runs; (outcome, run, message) for each."""
    from statekeeper.errors import ThreadBusyError
    from statekeeper.graphs import run_exclusive

    compiled = graph.compile(checkpointer=saver)
    outcomes = []
    for _ in range(n):
        run = uuid.uuid4().hex
        try:
            run_exclusive(compiled, {"runs": [run]}, config(run), multitask=strategy)  # type: ignore[arg-type]
        except ThreadBusyError as exc:
            outcomes.append(("refused", run, str(exc)))
        else:
            outcomes.append(("ok", run, ""))
    return outcomes


if __name__ == "__main__":
    from statekeeper.checkpointers import open_checkpointer

    url, strategy, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open_checkpointer(url) as opened:
        print("ready", flush=True)
        sys.stdin.readline()
        for outcome, run, message in runs(opened, strategy, count):
            print(outcome, run, message, flush=True)

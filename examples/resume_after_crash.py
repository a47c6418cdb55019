"""Resume a LangGraph run after the process running it dies.

A four-step "report" graph (plan -> research -> write -> review) is checkpointed to a
SQLite file. The run starts in a child process that dies abruptly (``os._exit``: no
cleanup, no ``finally``, like a crash or ``kill -9``) right after the research step.
This process then opens the same file, shows what was saved, and resumes the run from
where it stopped, knowing nothing but its thread id. Steps already done are not re-run.

    .venv/bin/python examples/resume_after_crash.py

Deterministic, offline, no API key. The database is .statekeeper/report.db (recreated each
run) under the current directory.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph

from statekeeper.checkpointers import open_checkpointer

DB_FILE = Path(".statekeeper/report.db")
DB_URL = f"sqlite:///{DB_FILE}"
THREAD_ID = "report-42"
STEPS = ["plan", "research", "write", "review"]

# Stands in for a search API or an LLM: same question, same answer, no network.
FACTS = {
    "what": "Tides are the rise and fall of the sea, twice a day.",
    "why": "The Moon's gravity pulls the ocean into two bulges.",
    "when": "High tide comes about 50 minutes later each day.",
}


class Report(TypedDict, total=False):
    topic: str
    questions: list[str]
    notes: list[str]
    draft: str
    approved: bool


def say(text: str) -> None:
    print(text, flush=True)  # flush: a crashing process loses whatever is buffered


# -- the graph -----------------------------------------------------------------------------

CRASH_AFTER: str | None = None  # set by --crash-after in the child process


def node(name: str, work: Any) -> Any:
    """Wrap a step so it reports when it is done, and so the child process dies at the
    start of the step that follows ``--crash-after``'s step."""

    def run(state: Report) -> dict[str, Any]:
        who = "   child> " if CRASH_AFTER else "   "
        previous = STEPS[STEPS.index(name) - 1] if name != STEPS[0] else None
        if CRASH_AFTER is not None and previous == CRASH_AFTER:
            say(f"{who}{name}: the process dies here (os._exit), before {name} is done")
            os._exit(1)
        update: dict[str, Any] = work(state)
        say(f"{who}{name}: done")
        return update

    return run


def plan(state: Report) -> dict[str, Any]:
    return {"questions": ["what", "why", "when"]}


def research(state: Report) -> dict[str, Any]:
    return {"notes": [FACTS[q] for q in state["questions"]]}


def write(state: Report) -> dict[str, Any]:
    return {"draft": f"{state['topic'].title()}: " + " ".join(state["notes"])}


def review(state: Report) -> dict[str, Any]:
    return {"approved": len(state["notes"]) == len(state["questions"])}


def build_graph(checkpointer: Any) -> Any:
    builder = StateGraph(Report)
    for name, work in zip(STEPS, (plan, research, write, review), strict=True):
        builder.add_node(name, node(name, work))
    builder.add_edge(START, STEPS[0])
    for a, b in itertools.pairwise(STEPS):
        builder.add_edge(a, b)
    builder.add_edge(STEPS[-1], END)
    return builder.compile(checkpointer=checkpointer)


def config() -> dict[str, Any]:
    return {"configurable": {"thread_id": THREAD_ID}}


# -- the two processes -------------------------------------------------------------------


def child(crash_after: str) -> None:
    """Start the run; die right after ``crash_after`` has been checkpointed."""
    global CRASH_AFTER
    CRASH_AFTER = crash_after
    with open_checkpointer(DB_URL) as saver:
        graph = build_graph(saver)
        # durability="sync": each step's checkpoint is committed before the next step
        # starts, so nothing finished is lost however abruptly the process ends.
        graph.invoke({"topic": "tides"}, config(), durability="sync")
    say("   child> finished without crashing (unexpected)")


def show_history(graph: Any) -> None:
    history = list(graph.get_state_history(config()))
    say(f"   Thread {THREAD_ID!r} has {len(history)} checkpoints, oldest first:")
    for snapshot in reversed(history):
        step = snapshot.metadata["step"]
        done = ", ".join(k for k in Report.__annotations__ if k in snapshot.values) or "-"
        upcoming = ", ".join(snapshot.next) or "(finished)"
        say(f"     step {step:>2}  next: {upcoming:<10}  state: {done}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crash-after", choices=STEPS[:-1], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.crash_after:
        child(args.crash_after)
        return 0

    for path in DB_FILE.parent.glob(DB_FILE.name + "*"):  # report.db, -wal, -shm: start fresh
        path.unlink()
    say(f"Checkpoints go to {DB_URL}, thread id {THREAD_ID!r}.")
    say("")
    say("1. A child process starts the run. It will crash after 'research'.")
    crashed = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--crash-after", "research"],
        check=False,
    )
    say(f"   The child exited with code {crashed.returncode}: it crashed mid-run.")
    if crashed.returncode == 0:
        say("   Expected a crash; stopping.")
        return 1
    say("")

    say("2. This process opens the same database and looks the thread up by id.")
    with open_checkpointer(DB_URL) as saver:
        graph = build_graph(saver)
        show_history(graph)
        pending = graph.get_state(config()).next
        say(f"   Not finished: the next step is {', '.join(pending)}.")
        say("")

        say("3. Resume: graph.invoke(None, config) continues from the last checkpoint;")
        say("   plan and research are not run again.")
        final = graph.invoke(None, config())
        say("")

        say("4. Finished.")
        show_history(graph)
        say(
            textwrap.fill(
                final["draft"], 78, initial_indent="   Draft: ", subsequent_indent=" " * 10
            )
        )
        say(f"   Approved: {final['approved']}")
    say("")
    say("Resumed after the crash and finished.")
    return 0


if __name__ == "__main__":
    sys.exit(main())

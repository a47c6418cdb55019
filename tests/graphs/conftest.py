"""Graph modules written to ``tmp_path`` and loaded by reference, as the runner loads them.

A ticket graph exists in two schema versions of one state class:

* v1: ``customer: str``, ``legacy_flag: bool``, ``priority: str`` ("1".."5" as text);
* v2: ``customer`` renamed to ``requester``, ``legacy_flag`` removed, ``priority``
  tightened to an int from 1 to 5, with the migration from v1.

Both run ``intake -> triage -> review -> close``; ``review`` asks ``interrupt()``. Each
node appends its name to ``calls.log`` next to the module, so tests count executions.
``triage`` raises once if the file ``fail-triage`` exists, and kills its process if
``STATEKEEPER_TEST_KILL_AT`` names it. "Deploying" v2 rewrites the module under the same
name, so the reference stored in the thread's metadata finds the new code.
"""

from __future__ import annotations

import shutil
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from statekeeper.graphs import Runner

COMMON = """
import operator
import os
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt
from pydantic import BaseModel, Field

from statekeeper.graphs import VersionedState

HERE = Path(__file__).parent


def called(name: str) -> None:
    with (HERE / "calls.log").open("a") as log:
        log.write(name + "\\n")
    if os.environ.get("STATEKEEPER_TEST_KILL_AT") == name:
        os._exit(17)
    flag = HERE / f"fail-{name}"
    if flag.exists():
        flag.unlink()
        raise RuntimeError(f"{name} failed once")


def build(intake, triage, review, close):
    builder = StateGraph(Ticket)
    for node in (intake, triage, review, close):
        builder.add_node(node.__name__, node)
    builder.add_edge(START, "intake")
    builder.add_edge("intake", "triage")
    builder.add_edge("triage", "review")
    builder.add_edge("review", "close")
    builder.add_edge("close", END)
    return builder
"""

V1 = (
    COMMON
    + """

class Ticket(VersionedState):
    messages: Annotated[list[AnyMessage], add_messages] = []
    notes: Annotated[list[str], operator.add] = []
    customer: str
    legacy_flag: bool = False
    priority: str


def intake(state: Ticket) -> dict[str, Any]:
    called("intake")
    return {"notes": ["intake"], "messages": [HumanMessage(f"help {state.customer}")]}


def triage(state: Ticket) -> dict[str, Any]:
    called("triage")
    return {"notes": [f"triage p{state.priority}"]}


def review(state: Ticket) -> dict[str, Any]:
    called("review")
    answer = interrupt({"question": "approve?", "customer": state.customer})
    return {"notes": [f"review {answer}"]}


def close(state: Ticket) -> dict[str, Any]:
    called("close")
    return {"notes": ["closed"], "messages": [AIMessage("closed")]}


graph = build(intake, triage, review, close)
"""
)

V2 = (
    COMMON
    + """

class Ticket(VersionedState):
    schema_version: ClassVar[int] = 2
    messages: Annotated[list[AnyMessage], add_messages] = []
    notes: Annotated[list[str], operator.add] = []
    requester: str
    priority: Annotated[int, Field(ge=1, le=5)]


@Ticket.migration(from_version=1)
def v1_to_v2(values: dict[str, Any]) -> dict[str, Any]:
    values["requester"] = values.pop("customer")
    values.pop("legacy_flag", None)
    values["priority"] = int(values["priority"])
    return values


def intake(state: Ticket) -> dict[str, Any]:
    called("intake")
    return {"notes": ["intake"], "messages": [HumanMessage(f"help {state.requester}")]}


def triage(state: Ticket) -> dict[str, Any]:
    called("triage")
    return {"notes": [f"triage p{state.priority + 0} (v2)"]}


def review(state: Ticket) -> dict[str, Any]:
    called("review")
    answer = interrupt({"question": "approve?", "requester": state.requester})
    return {"notes": [f"review {answer} (v2)"]}


def close(state: Ticket) -> dict[str, Any]:
    called("close")
    return {"notes": ["closed (v2)"], "messages": [AIMessage("closed")]}


graph = build(intake, triage, review, close)
"""
)

# v2 of the state with no migration registered: a v1 thread cannot be brought up to date.
V2_WITHOUT_MIGRATION = V2.replace("@Ticket.migration(from_version=1)\n", "")

V1_INPUT = {"customer": "ada", "priority": "3", "legacy_flag": True}


@dataclass
class Modules:
    """Writes graph modules into ``directory`` (the current directory) under one name."""

    directory: Path
    name: str

    @property
    def ref(self) -> str:
        return f"{self.name}:graph"

    def write(self, source: str, name: str | None = None) -> str:
        """Write ``source`` as module ``name`` (default: this test's module), replacing
        any earlier version in this process, and return its ``module:graph`` ref."""
        name = name or self.name
        (self.directory / f"{name}.py").write_text(source)
        shutil.rmtree(self.directory / "__pycache__", ignore_errors=True)
        sys.modules.pop(name, None)
        return f"{name}:graph"

    def calls(self) -> Counter[str]:
        log = self.directory / "calls.log"
        return Counter(log.read_text().split()) if log.exists() else Counter()

    def fail_once(self, node: str) -> None:
        (self.directory / f"fail-{node}").touch()


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Modules]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # load_graph adds the cwd to it
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    made = Modules(tmp_path, f"tickets_{uuid.uuid4().hex[:12]}")
    yield made
    for name in [n for n in sys.modules if n.startswith(made.name)]:
        del sys.modules[name]


@pytest.fixture
def runner(saver: Any) -> Runner:
    return Runner(saver)


def checkpoints(saver: Any, thread_id: str) -> list[tuple[str, dict[str, Any]]]:
    """Every checkpoint of a thread (every namespace), newest first: id and metadata."""
    return [
        (t.checkpoint["id"], dict(t.metadata))
        for t in saver.list({"configurable": {"thread_id": thread_id}})
    ]

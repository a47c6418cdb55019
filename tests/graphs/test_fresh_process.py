"""A thread started in one process is resumed by id in a fresh one, with and without
``LANGGRAPH_STRICT_MSGPACK``: every value (messages, a nested model, an enum) comes back as
its type, and nothing is logged about types — not even while the runner reads which graph
the thread belongs to, before the graph's module is imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.graphs.conftest import Modules

ROOT = Path(__file__).resolve().parents[2]

SOURCE = """
import enum
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt
from pydantic import BaseModel

from statekeeper.graphs import VersionedState


class Mood(enum.Enum):
    CALM = "calm"
    STORMY = "stormy"


class Contact(BaseModel):
    name: str
    tags: list[str] = []


class Chat(VersionedState):
    messages: Annotated[list[AnyMessage], add_messages] = []
    contact: Contact
    mood: Mood = Mood.CALM


def greet(state: Chat) -> dict[str, Any]:
    return {
        "messages": [HumanMessage(f"hi {state.contact.name}")],
        "contact": Contact(name=state.contact.name, tags=["greeted"]),
        "mood": Mood.STORMY,
    }


def ask(state: Chat) -> dict[str, Any]:
    answer = interrupt({"question": "reply?"})
    return {"messages": [AIMessage(answer)]}


builder = StateGraph(Chat)
builder.add_node("greet", greet)
builder.add_node("ask", ask)
builder.add_edge(START, "greet")
builder.add_edge("greet", "ask")
builder.add_edge("ask", END)
graph = builder
"""

START_RUN = """
from statekeeper.checkpointers import open_checkpointer
from statekeeper.graphs import Runner
with open_checkpointer(URL) as saver:
    result = Runner(saver).run(REF, {"contact": {"name": "ada"}}, thread_id="t")
print(json.dumps({"status": result.status, "next": list(result.next)}))
"""

RESUME = """
import logging
from langgraph.checkpoint.serde.event_hooks import register_serde_event_listener
from statekeeper.checkpointers import open_checkpointer
from statekeeper.graphs import Runner
events = []
register_serde_event_listener(lambda event: events.append(event["kind"]))
module = REF.split(":")[0]
assert module not in sys.modules
with open_checkpointer(URL) as saver:
    result = Runner(saver).resume("t", answer="hello")
    chat = Runner(saver).state("t")
mod = sys.modules[module]
assert isinstance(chat, mod.Chat), type(chat)
assert isinstance(result.values["contact"], mod.Contact), result.values
assert result.values["mood"] is mod.Mood.STORMY, result.values
assert chat.contact.tags == ["greeted"]
print(json.dumps({
    "status": result.status,
    "messages": [m.content for m in chat.messages],
    "events": events,
}))
"""

COMPLAINTS = ("unregistered", "blocked", "allowlist", "allowed_msgpack_modules", "warning")


def run_child(body: str, url: str, ref: str, cwd: Path, strict: bool) -> dict[str, object]:
    code = f"import json, sys\nsys.path.insert(0, {str(ROOT)!r})\nURL = {url!r}\nREF = {ref!r}\n"
    env = dict(os.environ, PYTHONWARNINGS="always")
    env["LANGGRAPH_STRICT_MSGPACK"] = "true" if strict else "false"
    proc = subprocess.run(
        [sys.executable, "-c", code + body],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lowered = proc.stderr.lower()
    for complaint in COMPLAINTS:
        assert complaint not in lowered, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "default"])
def test_resume_in_a_fresh_process(tmp_path: Path, modules: Modules, strict: bool) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    ref = modules.write(SOURCE)
    started = run_child(START_RUN, url, ref, tmp_path, strict)
    assert started == {"status": "interrupted", "next": ["ask"]}
    resumed = run_child(RESUME, url, ref, tmp_path, strict)
    assert resumed == {"status": "done", "messages": ["hi ada", "hello"], "events": []}

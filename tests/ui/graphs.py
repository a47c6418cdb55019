"""The graph the inspector's tests run, by reference (``tests.ui.graphs:chat``): a chat
whose agent calls a tool, asks a subgraph, then waits at an ``interrupt()`` for a human
to approve its reply.

    agent -> tools -> research (a subgraph: its own checkpoint namespace) -> ask -> finish

The agent repeats the user's words, so a hostile message travels through every channel.
"""

from __future__ import annotations

from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt
from pydantic import BaseModel, Field


class Chat(BaseModel):
    messages: Annotated[list[AnyMessage], add_messages] = Field(default_factory=list)
    answer: str | None = None


def agent(state: Chat) -> dict[str, Any]:
    said = next(str(m.content) for m in reversed(state.messages) if isinstance(m, HumanMessage))
    call = {"name": "lookup", "args": {"query": said}, "id": "call-1"}
    return {"messages": [AIMessage(content=f"You said: {said}", tool_calls=[call], id="ai-1")]}


def tools(state: Chat) -> dict[str, Any]:
    return {"messages": [ToolMessage(content="found 3 orders", tool_call_id="call-1", id="tool-1")]}


def look(state: Chat) -> dict[str, Any]:
    return {"messages": [AIMessage(content="looked it up", id="ai-look")]}


def ask(state: Chat) -> dict[str, Any]:
    answer = interrupt({"question": "Send the reply?", "draft": str(state.messages[-1].content)})
    return {"answer": str(answer)}


def finish(state: Chat) -> dict[str, Any]:
    outcome = "sent" if state.answer == "yes" else "discarded"
    return {"messages": [AIMessage(content=f"(reply {outcome})", id="ai-done")]}


def _research() -> Any:
    sub = StateGraph(Chat)
    sub.add_node("look", look)
    sub.add_edge(START, "look")
    sub.add_edge("look", END)
    return sub.compile()


def build() -> StateGraph[Any]:
    builder = StateGraph(Chat)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools)
    builder.add_node("research", _research())
    builder.add_node("ask", ask)
    builder.add_node("finish", finish)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    builder.add_edge("tools", "research")
    builder.add_edge("research", "ask")
    builder.add_edge("ask", "finish")
    builder.add_edge("finish", END)
    return builder


chat = build()

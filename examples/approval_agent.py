"""A support agent that looks things up with a tool and asks a human before replying.

    agent --(tool calls)--> tools --> agent --> approve (interrupt) --> send

The state is typed (:class:`Ticket`, a versioned pydantic model) and the "model" is a
scripted stand-in, so the graph runs offline and deterministically. Run it with the CLI:

    statekeeper run examples.approval_agent:graph --thread t1 \\
        --input '{"messages": [{"role": "user", "content": "Where is order 1042?"}]}'
    statekeeper resume t1 --answer yes

To use a real model, build the graph with any LangChain chat model that supports tools:
``make_graph(init_chat_model("openai:gpt-4o-mini"))`` (see the README).

``APPROVAL_AGENT_TOOL_DELAY`` (seconds) slows the tool down, which ``statekeeper demo``
uses to kill the process while the tool is running.
"""

from __future__ import annotations

import os
import time
from typing import Annotated, Any, ClassVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from langgraph.types import interrupt
from pydantic import Field

from statekeeper.graphs import VersionedState

ORDERS = {
    "1042": {"status": "shipped", "carrier": "DHL", "eta": "Thursday"},
    "1043": {"status": "packing", "carrier": None, "eta": "next week"},
}


class Ticket(VersionedState):
    """The agent's state: the conversation, and whether a human approved the reply."""

    schema_version: ClassVar[int] = 1

    messages: Annotated[list[AnyMessage], add_messages] = Field(default_factory=list)
    approved: bool | None = None


@tool
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order's status, carrier and expected delivery."""
    time.sleep(float(os.environ.get("APPROVAL_AGENT_TOOL_DELAY", "0")))
    return ORDERS.get(order_id, {"status": "unknown order"})


def scripted_model(messages: list[AnyMessage]) -> AIMessage:
    """A stand-in for a chat model: ask the tool about every order number in the
    question, then answer from what the tool said."""
    results = [m for m in messages if isinstance(m, ToolMessage)]
    if not results:
        question = str(messages[-1].content)
        ids = [word.strip("?.,!#") for word in question.split() if word.strip("?.,!#").isdigit()]
        calls = [
            {"name": "lookup_order", "args": {"order_id": order_id}, "id": f"call-{order_id}"}
            for order_id in ids
        ]
        return AIMessage(content="", tool_calls=calls, id="ai-lookup")
    facts = "; ".join(str(result.content) for result in results)
    return AIMessage(content=f"Here is what I found: {facts}", id="ai-draft")


def make_graph(model: BaseChatModel | None = None) -> StateGraph[Any]:
    """The graph builder, around ``model`` (the scripted stand-in when None)."""
    bound = model.bind_tools([lookup_order]) if model is not None else None

    def agent(state: Ticket) -> dict[str, Any]:
        if bound is None:
            return {"messages": [scripted_model(state.messages)]}
        return {"messages": [bound.invoke(state.messages)]}

    def route(state: Ticket) -> str:
        last = state.messages[-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else "approve"

    def approve(state: Ticket) -> dict[str, Any]:
        answer = interrupt({"question": "Send this reply?", "reply": state.messages[-1].content})
        return {"approved": str(answer).strip().lower() in {"yes", "y", "true", "ok"}}

    def send(state: Ticket) -> dict[str, Any]:
        outcome = "sent" if state.approved else "discarded"
        return {"messages": [AIMessage(content=f"(reply {outcome})", id="ai-outcome")]}

    builder = StateGraph(Ticket)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([lookup_order]))
    builder.add_node("approve", approve)
    builder.add_node("send", send)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", "approve"])
    builder.add_edge("tools", "agent")
    builder.add_edge("approve", "send")
    builder.add_edge("send", END)
    return builder


graph = make_graph()


if __name__ == "__main__":
    from langgraph.types import Command

    from statekeeper.checkpointers import open_checkpointer

    with open_checkpointer("memory://") as saver:
        agent = graph.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "ticket-1042"}}
        result = agent.invoke({"messages": [("user", "Where is my order 1042?")]}, config)
        (pending,) = result["__interrupt__"]
        print(f"The agent asks: {pending.value['question']}")
        print(f"  {pending.value['reply']}")
        result = agent.invoke(Command(resume="yes"), config)
        print(f"A human said yes: {result['messages'][-1].content}")

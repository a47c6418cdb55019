"""The chat workload every benchmark here plays: deterministic text, the one-node chat
graph (optionally with a ``SummarizationNode``), and a turn's input.

The graph is a ``StateGraph`` over ``messages: Annotated[list[AnyMessage], add_messages]``
whose node, ``chatbot``, appends a deterministic AI reply of about 150 tokens (~600
characters, from a seeded word list, so it does not compress trivially; no LLM is
called). Each turn sends one ~100-token (~400 characters) ``HumanMessage``; the same
thread and turn number give the same text on every saver.
"""

import random
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

VOCABULARY = """
the a an to of and in on for with that this it is are was be can will would should could
we you they our your their my me us them agent graph state thread checkpoint message
memory tool call result user assistant model token prompt context window summary retry
error timeout database file table index query row column schema version migration lock
transaction commit rollback write read list history resume crash process server client
request response latency throughput cache hit miss batch queue worker task step node edge
branch loop condition input output value channel reducer config option default setting
deploy release build test lint type check coverage report metric trace log event alert
because however therefore although meanwhile instead otherwise perhaps usually rarely
quickly slowly carefully roughly exactly probably definitely simply really actually
first second third next last final early late small large fast slow new old good bad
simple complex stable flaky durable fragile safe risky clear vague short long empty full
customer invoice order payment refund shipment address account password email report
monday tuesday friday morning evening weekend quarter budget meeting deadline roadmap
python sqlite redis postgres json yaml http socket thread async await future promise
"""
WORDS = VOCABULARY.split()

# With a SummarizationNode: compact above this many tokens (a turn adds about 250), keep
# half of it; its extractive summarizer is offline and deterministic.
SUMMARY_BUDGET_TOKENS = 2000


def _sentence(rng: random.Random) -> str:
    words = rng.choices(WORDS, k=rng.randint(6, 16))
    if rng.random() < 0.3:
        words.insert(rng.randrange(len(words)), str(rng.randint(2, 9999)))
    text = " ".join(words)
    return text[0].upper() + text[1:] + rng.choice(".....?!")


def paragraph(rng: random.Random, chars: int) -> str:
    """Sentences of random words until about ``chars`` characters (~4 chars per token)."""
    sentences: list[str] = []
    while sum(len(s) + 1 for s in sentences) < chars:
        sentences.append(_sentence(rng))
    return " ".join(sentences)


def human_text(thread: int, turn: int) -> str:
    """The ~100-token user message of ``turn`` in ``thread``: same for every saver."""
    return paragraph(random.Random(f"human-{thread}-{turn}"), 400)


def turn_input(thread: int, turn: int) -> dict[str, Any]:
    """What one turn sends: ``graph.invoke(turn_input(t, n), thread_config(...))``."""
    return {"messages": [HumanMessage(human_text(thread, turn))]}


class ChatState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def chatbot(state: Any) -> dict[str, Any]:
    """Reply with ~150 tokens derived only from the last message (deterministic, no LLM)."""
    rng = random.Random(f"ai-{state['messages'][-1].content}")
    return {"messages": [AIMessage(paragraph(rng, 600))]}


def build_graph(saver: BaseCheckpointSaver[Any], *, summarize: bool = False) -> Any:
    """The chat graph on ``saver``; with ``summarize``, a ``SummarizationNode`` (no store:
    only the running summary) runs after ``chatbot`` and keeps the history within
    :data:`SUMMARY_BUDGET_TOKENS`."""
    if not summarize:
        builder = StateGraph(ChatState)
        builder.add_node("chatbot", chatbot)
        builder.add_edge(START, "chatbot")
        builder.add_edge("chatbot", END)
        return builder.compile(checkpointer=saver)
    from statekeeper.memory import SummarizationNode, SummaryState

    summarizing = StateGraph(SummaryState)
    summarizing.add_node("chatbot", chatbot)
    summarizing.add_node(
        "summarize", SummarizationNode(budget_tokens=SUMMARY_BUDGET_TOKENS, store=False)
    )
    summarizing.add_edge(START, "chatbot")
    summarizing.add_edge("chatbot", "summarize")
    summarizing.add_edge("summarize", END)
    return summarizing.compile(checkpointer=saver)


def thread_config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def play(graph: Any, thread_ids: list[str], turns: int) -> None:
    """Play ``turns`` untimed turns round-robin over the threads (turn 1 of every thread,
    then turn 2, ...)."""
    for turn in range(turns):
        for t, thread_id in enumerate(thread_ids):
            graph.invoke(turn_input(t, turn), thread_config(thread_id))

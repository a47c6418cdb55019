"""Properties of SummarizationNode over random conversations (hypothesis).

The rules are restated here independently of the implementation (``valid_ends``), then
checked on the state the node's update leaves once applied with ``add_messages``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.utils import count_tokens_approximately as count
from langchain_core.runnables import RunnableConfig
from langgraph.graph.message import add_messages
from langgraph.store.memory import InMemoryStore

from statekeeper.memory.node import RunningSummary, SummarizationNode
from statekeeper.memory.notes import Note
from statekeeper.memory.summarize import ExtractiveSummarizer, Summary

CONFIG: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_id": "cp"}}
# fmt: off
VOCABULARY = [
    "ok", "thanks", "haha", "yes", "sure", "Ana", "Bob", "Lisbon", "Porto", "cat", "Miso",
    "adopted", "yesterday", "flew", "bought", "last", "week", "3", "2024", "the", "a", "and",
    "it", "is", "was", "to", "my", "We", "They.", "Great!", "Really?", "I", "think", "so.",
    "tomorrow", "42", "Kepler",
]
# fmt: on
PROPERTIES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Recording:
    """The extractive summarizer, recording every call."""

    name = "extractive/1"

    def __init__(self) -> None:
        self.calls: list[tuple[list[BaseMessage], str | None]] = []

    def summarize(self, messages: Sequence[BaseMessage], previous_summary: str | None) -> Summary:
        self.calls.append((list(messages), previous_summary))
        return ExtractiveSummarizer().summarize(messages, previous_summary)


# -- random conversations ---------------------------------------------------------------

texts = st.lists(st.sampled_from(VOCABULARY), max_size=40).map(" ".join)


@st.composite
def conversations(draw: st.DrawFn) -> list[BaseMessage]:
    counter = itertools.count()
    calls = itertools.count()

    def ident() -> str | None:
        # one message in fifty has no id (outside a graph, nothing assigns one)
        return None if draw(st.integers(0, 49)) == 0 else f"m{next(counter)}"

    messages: list[BaseMessage] = [
        SystemMessage(draw(texts), id=ident()) for _ in range(draw(st.integers(0, 2)))
    ]
    for _ in range(draw(st.integers(0, 30))):
        kind = draw(st.sampled_from(["human"] * 4 + ["ai"] * 3 + ["tools"] * 2 + ["odd"]))
        if kind == "human":
            messages.append(HumanMessage(draw(texts), id=ident()))
        elif kind == "ai":
            messages.append(AIMessage(draw(texts), id=ident()))
        elif kind == "tools":
            ids = [f"call{next(calls)}" for _ in range(draw(st.integers(1, 3)))]
            tool_calls = [{"name": "lookup", "args": {"q": i}, "id": i} for i in ids]
            messages.append(AIMessage(draw(texts), tool_calls=tool_calls, id=ident()))
            results = [ToolMessage(draw(texts), tool_call_id=i, id=ident()) for i in ids]
            if draw(st.booleans()):  # results in any order, maybe a human in between
                results = draw(st.permutations(results))
                if draw(st.integers(0, 3)) == 0:
                    results.insert(1, HumanMessage(draw(texts), id=ident()))
            messages.extend(results)
        else:  # a system message mid-way, an orphan tool result, or an unanswered call
            odd = draw(st.sampled_from(["system", "orphan", "unanswered"]))
            if odd == "system":
                messages.append(SystemMessage(draw(texts), id=ident()))
            elif odd == "orphan":
                messages.append(ToolMessage(draw(texts), tool_call_id="lost", id=ident()))
            else:
                call = {"name": "lookup", "args": {}, "id": f"call{next(calls)}"}
                messages.append(AIMessage("", tool_calls=[call], id=ident()))
    return messages


# -- the rules, restated ----------------------------------------------------------------


def leading_systems(messages: Sequence[BaseMessage]) -> int:
    return next(
        (i for i, m in enumerate(messages) if not isinstance(m, SystemMessage)), len(messages)
    )


def call_ids(messages: Sequence[BaseMessage]) -> set[str]:
    found: set[str] = set()
    for message in messages:
        if isinstance(message, AIMessage):
            found |= {str(call["id"]) for call in message.tool_calls}
        elif isinstance(message, ToolMessage):
            found.add(message.tool_call_id)
    return found


def valid_ends(messages: Sequence[BaseMessage]) -> list[int]:
    start = leading_systems(messages)
    return [
        end
        for end in range(start + 1, len(messages))
        if all(m.id for m in messages[start:end])
        and isinstance(messages[end], HumanMessage)
        and not call_ids(messages[start:end]) & call_ids(messages[end:])
    ]


def kept_tokens(messages: Sequence[BaseMessage], end: int) -> int:
    return count([*messages[: leading_systems(messages)], *messages[end:]])


def unpaired(messages: Sequence[BaseMessage]) -> set[str]:
    """Tool-call ids with a call but no result, or a result but no call."""
    calls = {str(c["id"]) for m in messages if isinstance(m, AIMessage) for c in m.tool_calls}
    results = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    return calls ^ results


# -- properties -------------------------------------------------------------------------


@PROPERTIES
@given(
    messages=conversations(),
    budget=st.integers(20, 600),
    keep_share=st.one_of(st.none(), st.floats(0, 1)),
)
def test_one_compaction_keeps_every_rule(
    messages: list[BaseMessage], budget: int, keep_share: float | None
) -> None:
    keep = None if keep_share is None else int(budget * keep_share)
    summarizer, store = Recording(), InMemoryStore()
    node = SummarizationNode(
        budget_tokens=budget, keep_tokens=keep, summarizer=summarizer, store=store
    )
    keep = node.keep_tokens
    update = node({"messages": messages}, CONFIG)
    ends = valid_ends(messages)

    if count(messages) <= budget or not ends:
        event("no compaction: " + ("within budget" if count(messages) <= budget else "no cut"))
        assert update == {}
        assert summarizer.calls == []
        return

    after = add_messages(messages, update["messages"])
    start = leading_systems(messages)
    removed = [r.id for r in update["messages"]]
    end = start + len(removed)
    # a contiguous block after the leading system messages was removed, at a valid cut
    assert after == [*messages[:start], *messages[end:]]
    assert end in ends
    assert isinstance(after[start], HumanMessage)
    for call_id in call_ids(messages):  # a call and its results go or stay together
        carriers = [m for m in messages if call_id in call_ids([m])]
        assert all(m in after for m in carriers) or not any(m in after for m in carriers)
    if not unpaired(messages):
        assert not unpaired(after)
    # the summarizer saw exactly the removed messages, once
    assert [[m.id for m in call] for call, _ in summarizer.calls] == [removed]
    # the longest window within keep_tokens; else as small a window as the rules allow
    fitting = [e for e in ends if kept_tokens(messages, e) <= keep]
    event("compaction: " + ("window fits keep_tokens" if fitting else "smallest window"))
    assert end == (fitting[0] if fitting else ends[-1])
    if any(kept_tokens(messages, e) <= budget for e in ends):
        assert count(after) <= budget
    # every removed message is in a note, or makes no note on its own (chit-chat)
    notes = [Note.from_value(item.value) for item in store.search(("notes", "t"), limit=10_000)]
    in_notes = {i for note in notes for i in note.provenance.message_ids}
    for message in messages[start:end]:
        if message.id not in in_notes:
            assert ExtractiveSummarizer().summarize([message], None).notes == ()
    summary: RunningSummary = update["summary"]
    assert sorted(summary["note_keys"]) == sorted(note.key for note in notes)
    assert summary["tokens_before"] == count(messages)
    assert summary["tokens_after"] == count(after)
    assert (
        summary["tokens_saved"]
        == summary["tokens_saved_total"]
        == (count(messages) - count(after) - summary["summary_tokens"])
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    chunks=st.lists(conversations(), min_size=2, max_size=6),
    budget=st.integers(30, 400),
)
def test_a_growing_conversation_refreshes_the_summary_on_every_crossing(
    chunks: list[list[BaseMessage]], budget: int
) -> None:
    summarizer = Recording()
    node = SummarizationNode(budget_tokens=budget, summarizer=summarizer, store=False)
    state: dict[str, Any] = {"messages": []}
    saved: list[int] = []
    for number, chunk in enumerate(chunks):
        # fresh ids per chunk: a graph gives every message its own id
        for message in chunk:
            if message.id:
                message.id = f"{number}-{message.id}"
        state["messages"] = add_messages(state["messages"], chunk)
        previous: RunningSummary | None = state.get("summary")
        calls_before = len(summarizer.calls)
        crossing = count(state["messages"]) > budget and valid_ends(state["messages"])
        update = node(state, CONFIG)
        if not crossing:
            assert update == {}
            continue
        event(f"crossing number {len(saved) + 1}")
        assert len(summarizer.calls) == calls_before + 1
        assert summarizer.calls[-1][1] == (previous["text"] if previous else None)
        summary: RunningSummary = update["summary"]
        assert summary["compactions"] == (previous["compactions"] if previous else 0) + 1
        state["messages"] = add_messages(state["messages"], update["messages"])
        state["summary"] = summary
        saved.append(summary["tokens_saved"])
        assert summary["tokens_saved_total"] == sum(saved)
        assert summary["messages_summarized"] == sum(len(c) for c, _ in summarizer.calls)

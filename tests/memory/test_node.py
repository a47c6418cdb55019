"""SummarizationNode: compaction, notes with provenance, accounting, and real graphs."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import (
    FakeListChatModel,
    GenericFakeChatModel,
)
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.store.memory import InMemoryStore
from pydantic import BaseModel

from statekeeper.checkpointers import open_checkpointer
from statekeeper.errors import ConfigurationError
from statekeeper.memory.node import (
    NoteOptions,
    RunningSummary,
    StateOptions,
    SummarizationNode,
    SummaryState,
    checkpoint_id_of,
    notes_namespace,
    with_summary,
)
from statekeeper.memory.notes import Note
from statekeeper.memory.summarize import ChatModelSummarizer, Summary

NOW = datetime.datetime(2024, 6, 1, 12, 0, tzinfo=datetime.UTC)
CONFIG: RunnableConfig = {"configurable": {"thread_id": "t1", "checkpoint_id": "cp-1"}}


def said(day: int) -> dict[str, str]:
    return {"timestamp": f"2024-05-{day:02d}T09:00:00+00:00"}


def turns(count: int, *, start: int = 0) -> list[BaseMessage]:
    """``count`` human/AI exchanges with ids, each said on its own day."""
    messages: list[BaseMessage] = []
    for i in range(start, start + count):
        day = said(i % 28 + 1)
        messages.append(
            HumanMessage(f"I visited city number {i} and met Friend{i} there.", id=f"h{i}",
                         name="Ana", additional_kwargs=day)
        )  # fmt: skip
        messages.append(AIMessage(f"Tell me more about city {i}, please.", id=f"a{i}"))
    return messages


def stored_notes(store: InMemoryStore, namespace: tuple[str, ...] = ("notes", "t1")) -> list[Note]:
    return [Note.from_value(item.value) for item in store.search(namespace, limit=1000)]


def node(store: Any = None, *, namespace: Any = None, **options: Any) -> SummarizationNode:
    options.setdefault("budget_tokens", 200)
    notes = NoteOptions(namespace=namespace, clock=lambda: NOW)
    return SummarizationNode(store=store, notes=notes, **options)


class TestCompaction:
    def test_within_budget_does_nothing(self) -> None:
        assert node(store=False)({"messages": turns(2)}, CONFIG) == {}

    def test_over_budget_removes_the_oldest_and_keeps_a_window_from_a_human(self) -> None:
        store = InMemoryStore()
        messages = turns(10)
        update = node(store)({"messages": messages}, CONFIG)
        after = add_messages(messages, update["messages"])
        assert isinstance(after[0], HumanMessage)
        assert after == messages[-len(after) :]
        assert count_tokens_approximately(after) <= 100  # keep_tokens: half the budget
        # the longest window that fits: one more exchange would not
        assert count_tokens_approximately(messages[-len(after) - 2 :]) > 100

        summary: RunningSummary = update["summary"]
        assert summary["compactions"] == 1
        assert summary["messages_summarized"] == len(messages) - len(after)
        assert summary["tokens_before"] == count_tokens_approximately(messages)
        assert summary["tokens_after"] == count_tokens_approximately(after)
        assert summary["summary_tokens"] == count_tokens_approximately(
            [SystemMessage(summary["text"])]
        )
        assert summary["tokens_saved"] == (
            summary["tokens_before"] - summary["tokens_after"] - summary["summary_tokens"]
        )
        assert summary["tokens_saved_total"] == summary["tokens_saved"]
        assert summary["checkpoint_id"] == "cp-1"
        assert summary["updated_at"] == NOW.isoformat()
        assert summary["summarizer"] == "extractive/4"
        assert summary["notes_namespace"] == ["notes", "t1"]
        assert json.loads(json.dumps(summary)) == summary  # plain JSON

    def test_notes_have_provenance(self) -> None:
        store = InMemoryStore()
        update = node(store)({"messages": turns(10)}, CONFIG)
        notes = stored_notes(store)
        assert sorted(n.key for n in notes) == sorted(update["summary"]["note_keys"])
        removed = [r.id for r in update["messages"]]
        assert {i for n in notes for i in n.provenance.message_ids} == {
            i
            for i in removed
            if i.startswith("h")  # the AI asked only chit-chat questions
        } | {i for i in removed if i.startswith("a")}
        first = next(n for n in notes if n.provenance.message_ids == ("h0",))
        assert first.text == "Ana: I visited city number 0 and met Friend0 there."
        assert first.provenance.thread_id == "t1"
        assert first.provenance.checkpoint_id == "cp-1"
        assert first.provenance.said_from == datetime.datetime(2024, 5, 1, 9, tzinfo=datetime.UTC)
        assert first.provenance.said_to == first.provenance.said_from
        assert first.provenance.created_at == NOW
        assert first.provenance.summarizer == "extractive/4"
        assert {"0", "Friend0"} <= set(first.topics)
        value = store.get(("notes", "t1"), first.key)
        assert value is not None
        assert value.value["schema_version"] == 3

    def test_every_crossing_refreshes_the_summary_and_adds_up(self) -> None:
        store = InMemoryStore()
        summarize = node(store)
        state: dict[str, Any] = {"messages": []}
        saved: list[int] = []
        for chunk in range(6):
            state["messages"] = add_messages(state["messages"], turns(8, start=chunk * 8))
            update = summarize(state, CONFIG)
            assert update, "every chunk crosses the budget"
            state["messages"] = add_messages(state["messages"], update["messages"])
            state["summary"] = update["summary"]
            saved.append(update["summary"]["tokens_saved"])
        summary = state["summary"]
        assert summary["compactions"] == 6
        assert summary["tokens_saved_total"] == sum(saved)
        assert summary["messages_summarized"] == 96 - len(state["messages"])
        assert "Friend40" in summary["text"]  # the last compaction is in the summary
        notes = stored_notes(store)
        turns_noted = [n for n in notes if n.unit == "turn"]
        assert len(turns_noted) == summary["messages_summarized"]
        # one session note a day (a message a day), each with all of its messages
        sessions = [n for n in notes if n.unit == "session"]
        assert len(sessions) == summary["messages_summarized"] // 2
        assert {i for n in sessions for i in n.provenance.message_ids} == {
            i for n in turns_noted for i in n.provenance.message_ids
        }

    def test_leading_system_messages_are_kept(self) -> None:
        messages = [SystemMessage("Be brief.", id="s"), *turns(10)]
        update = node(store=False)({"messages": messages}, CONFIG)
        after = add_messages(messages, update["messages"])
        assert after[0].id == "s"
        assert isinstance(after[1], HumanMessage)
        assert "s" not in [r.id for r in update["messages"]]

    def test_tool_calls_stay_with_their_results(self) -> None:
        call = AIMessage("", id="call", tool_calls=[{"name": "f", "args": {}, "id": "c1"}])
        result = ToolMessage("x" * 400, tool_call_id="c1", id="result")
        # a human message between a call and its result is not a valid cut
        messages = [*turns(2), call, HumanMessage("what?", id="q"), result, *turns(1, start=5)]
        update = node(store=False, budget_tokens=100)({"messages": messages}, CONFIG)
        removed = {r.id for r in update["messages"]}
        assert {"call", "q", "result"} <= removed
        after = add_messages(messages, update["messages"])
        assert [m.id for m in after] == ["h5", "a5"]

    def test_no_valid_cut_does_nothing_and_calls_no_summarizer(self) -> None:
        class Refusing:
            name = "refusing/1"

            def summarize(
                self, messages: Sequence[BaseMessage], previous_summary: str | None
            ) -> Summary:
                raise AssertionError("must not be called")

        huge = [HumanMessage("x" * 2000, id="h"), AIMessage("y" * 2000, id="a")]
        summarize = node(store=False, summarizer=Refusing())
        assert summarize({"messages": huge}, CONFIG) == {}
        no_ids = [HumanMessage("x" * 800), AIMessage("y" * 800), HumanMessage("z")]
        assert summarize({"messages": no_ids}, CONFIG) == {}

    def test_compresses_up_to_the_first_message_without_an_id(self) -> None:
        messages = [*turns(6), HumanMessage("no id " * 20), *turns(6, start=10)]
        update = node(store=False)({"messages": messages}, CONFIG)
        assert [r.id for r in update["messages"]] == [m.id for m in messages[:12]]

    def test_keep_zero_keeps_only_the_last_turn(self) -> None:
        messages = turns(10)
        update = node(store=False, keep_tokens=0)({"messages": messages}, CONFIG)
        assert [m.id for m in add_messages(messages, update["messages"])] == ["h9", "a9"]

    def test_a_custom_token_counter_and_keys(self) -> None:
        def count(messages: Sequence[BaseMessage]) -> int:
            return len(messages)

        summarize = node(
            store=False,
            budget_tokens=6,
            state=StateOptions(messages_key="history", summary_key="memory", token_counter=count),
        )
        update = summarize({"history": turns(4)}, CONFIG)
        assert len(update["history"]) == 6
        assert update["memory"]["tokens_before"] == 8
        assert update["memory"]["tokens_after"] == 2
        assert update["memory"]["summary_tokens"] == 1


class TestStateShapes:
    def test_pydantic_state(self) -> None:
        class State(BaseModel):
            messages: list[AnyMessage]
            summary: RunningSummary | None = None

        update = node(store=False)(State(messages=turns(10)), CONFIG)
        assert update["summary"]["compactions"] == 1
        previous = update["summary"]
        state = State(messages=turns(10, start=20), summary=previous)
        assert node(store=False)(state, CONFIG)["summary"]["compactions"] == 2

    def test_missing_messages_channel(self) -> None:
        with pytest.raises(ConfigurationError, match="no 'messages' channel"):
            node(store=False)({"history": []}, CONFIG)


class TestConfiguration:
    @pytest.mark.parametrize(("budget", "keep"), [(0, None), (100, 101), (100, -1)])
    def test_bad_budgets(self, budget: int, keep: int | None) -> None:
        with pytest.raises(ConfigurationError, match="budget_tokens"):
            SummarizationNode(budget_tokens=budget, keep_tokens=keep)

    def test_bad_store(self) -> None:
        with pytest.raises(ConfigurationError, match="BaseStore"):
            SummarizationNode(budget_tokens=10, store="memory://")

    def test_no_store_outside_a_graph(self) -> None:
        with pytest.raises(ConfigurationError, match="store=False"):
            node()({"messages": turns(10)}, CONFIG)

    def test_store_false_writes_no_notes(self) -> None:
        update = node(store=False)({"messages": turns(10)}, {})
        assert update["summary"]["note_keys"] == []
        assert update["summary"]["notes_namespace"] is None
        assert update["summary"]["checkpoint_id"] is None

    def test_notes_need_a_thread_id(self) -> None:
        with pytest.raises(ConfigurationError, match="thread_id"):
            node(InMemoryStore())({"messages": turns(10)}, {"configurable": {}})

    def test_namespace_tuple_or_function(self) -> None:
        store = InMemoryStore()
        node(store, namespace=("memories",))({"messages": turns(10)}, CONFIG)
        assert stored_notes(store, ("memories",))

        def per_user(config: RunnableConfig) -> tuple[str, ...]:
            return ("users", config["configurable"]["user"])

        config: RunnableConfig = {"configurable": {"thread_id": "t", "user": "ana"}}
        node(store, namespace=per_user)({"messages": turns(10)}, config)
        assert stored_notes(store, ("users", "ana"))

    @pytest.mark.parametrize("namespace", [(), ("a.b",), ("",)])
    def test_invalid_namespace(self, namespace: tuple[str, ...]) -> None:
        with pytest.raises(ConfigurationError, match="namespace"):
            node(InMemoryStore(), namespace=namespace)({"messages": turns(10)}, CONFIG)

    @pytest.mark.parametrize(
        "namespace", [(), "abc", ("a.b",), ("",), ("a\x00",), ("a", 5), ["notes"], 5]
    )
    def test_a_namespace_is_checked_when_the_options_are_made(self, namespace: Any) -> None:
        with pytest.raises(ConfigurationError, match="invalid notes namespace") as e:
            NoteOptions(namespace=namespace)
        assert "\n" not in str(e.value)

    def test_a_namespace_function_is_checked_when_called(self) -> None:
        summarize = node(InMemoryStore(), namespace=lambda config: ("a", "b.c"))
        with pytest.raises(ConfigurationError, match=r"invalid notes namespace \('a', 'b.c'\)"):
            summarize({"messages": turns(10)}, CONFIG)
        lists = node(InMemoryStore(), namespace=lambda config: ["users", "ana"])
        assert lists({"messages": turns(10)}, CONFIG)["summary"]["notes_namespace"] == [
            "users",
            "ana",
        ]

    @pytest.mark.parametrize(
        ("arguments", "message"),
        [
            ({"budget_tokens": "10"}, "budget_tokens must be an int, not '10'"),
            ({"budget_tokens": True}, "budget_tokens must be an int, not True"),
            ({"budget_tokens": 10, "keep_tokens": 2.5}, "keep_tokens must be an int or None"),
            ({"budget_tokens": 10, "summarizer": "extractive"}, "summarizer must be a Summarizer"),
            ({"budget_tokens": 10, "notes": {"namespace": ("a",)}}, "notes must be a NoteOptions"),
            ({"budget_tokens": 10, "state": "messages"}, "state must be a StateOptions"),
        ],
    )
    def test_arguments_of_the_wrong_type(self, arguments: dict[str, Any], message: str) -> None:
        with pytest.raises(ConfigurationError, match=message):
            SummarizationNode(**arguments)

    @pytest.mark.parametrize(
        ("options", "message"),
        [
            (lambda: NoteOptions(clock="now"), "clock must be a function"),
            (lambda: StateOptions(messages_key=""), "channel's name must be text"),
            (lambda: StateOptions(summary_key=5), "channel's name must be text"),
            (lambda: StateOptions(token_counter=100), "token_counter must be a function"),
        ],
    )
    def test_option_fields_of_the_wrong_type(self, options: Any, message: str) -> None:
        with pytest.raises(ConfigurationError, match=message):
            options()

    @pytest.mark.parametrize(
        ("state", "message"),
        [
            ({"messages": [5]}, r"state\['messages'\]\[0\] must be a message .*got int 5$"),
            ({"messages": ["hi"]}, r"state\['messages'\]\[0\] must be a message"),
            ({"messages": "hello"}, r"state\['messages'\] must be a list of messages, got str"),
            ({"messages": 7}, r"state\['messages'\] must be a list of messages, got int 7"),
            ({"messages": [], "summary": 5}, r"state\['summary'\] must be a RunningSummary"),
            ({"messages": [], "summary": {"text": "x"}}, r"RunningSummary, .*\(it lacks"),
        ],
    )
    def test_state_that_is_not_messages_is_refused_in_one_line(
        self, state: dict[str, Any], message: str
    ) -> None:
        with pytest.raises(ConfigurationError, match=message) as e:
            node(store=False, budget_tokens=10)(state, CONFIG)
        assert "\n" not in str(e.value)

    def test_default_namespace_escapes_thread_ids(self) -> None:
        assert notes_namespace("a.b") == ("notes", "a%2Eb")
        assert notes_namespace("a%2Eb") == ("notes", "a%252Eb")
        assert notes_namespace("x\x00") == ("notes", "x%00")
        with pytest.raises(ConfigurationError):
            notes_namespace("")


def test_checkpoint_id_of() -> None:
    assert checkpoint_id_of({}) is None
    assert checkpoint_id_of({"configurable": {"checkpoint_id": "c"}}) == "c"
    in_root = {"checkpoint_id": None, "checkpoint_ns": "n:1", "checkpoint_map": {"": "root"}}
    assert checkpoint_id_of({"configurable": in_root}) == "root"
    in_sub = {"checkpoint_ns": "outer:1|n:2", "checkpoint_map": {"": "root", "outer:1": "sub"}}
    assert checkpoint_id_of({"configurable": in_sub}) == "sub"


def test_with_summary() -> None:
    messages = [SystemMessage("Be brief.", id="s"), HumanMessage("hi", id="h")]
    assert with_summary(messages, None) == messages
    summary = node(store=False)({"messages": turns(10)}, CONFIG)["summary"]
    sent = with_summary(messages, summary)
    assert [m.id for m in sent] == ["s", None, "h"]
    assert sent[1].text == f"Summary of the earlier conversation:\n{summary['text']}"


def test_chat_model_summarizer_in_the_node() -> None:
    answer = {
        "summary": "Ana travels a lot.",
        "notes": [{"text": "Ana visited city 0.", "sources": [1]}],
    }
    store = InMemoryStore()
    model = FakeListChatModel(responses=[json.dumps(answer), "not json"])
    summarize = node(store, summarizer=ChatModelSummarizer(model, name="chat/1:fake"))
    first = summarize({"messages": turns(10)}, CONFIG)
    assert first["summary"]["text"] == "Ana travels a lot."
    assert first["summary"]["summarizer"] == "chat/1:fake"
    [note] = [n for n in stored_notes(store) if n.unit == "turn"]
    assert note.provenance.message_ids == ("h0",)
    assert note.provenance.summarizer == "chat/1:fake"
    # a malformed answer: the fallback's notes say who made them
    second = summarize({"messages": turns(10, start=10), "summary": first["summary"]}, CONFIG)
    assert second["summary"]["summarizer"] == "extractive/4"
    assert second["summary"]["text"].startswith("Ana travels a lot.")
    made_by = {n.provenance.summarizer for n in stored_notes(store)}
    assert made_by == {"chat/1:fake", "extractive/4", "session/1"}


# -- a real graph ---------------------------------------------------------------------------


class ChatState(SummaryState):
    pass


def chat_graph(model: GenericFakeChatModel, budget: int) -> StateGraph[Any]:
    def chat(state: ChatState) -> dict[str, Any]:
        reply = model.invoke(with_summary(state["messages"], state.get("summary")))
        return {"messages": [reply]}

    builder = StateGraph(ChatState)
    builder.add_node("chat", chat)
    builder.add_node("summarize", SummarizationNode(budget_tokens=budget))
    builder.add_edge(START, "chat")
    builder.add_edge("chat", "summarize")
    builder.add_edge("summarize", END)
    return builder


def replies(count: int) -> Iterator[AIMessage]:
    return iter(AIMessage(f"Noted: fact {i} is about the planet Kepler{i}.") for i in range(count))


def test_a_long_chat_stays_bounded_and_resumes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    store = InMemoryStore()
    config: RunnableConfig = {"configurable": {"thread_id": "chat-1"}}
    budget = 300
    sizes: list[int] = []
    with open_checkpointer(url) as saver:
        graph = chat_graph(GenericFakeChatModel(messages=replies(40)), budget).compile(
            checkpointer=saver, store=store
        )
        for turn in range(40):
            message = HumanMessage(f"Remember that fact {turn} is about Kepler{turn}.",
                                   additional_kwargs=said(turn % 28 + 1))  # fmt: skip
            state = graph.invoke({"messages": [message]}, config)
            sizes.append(count_tokens_approximately(state["messages"]))
        assert max(sizes) <= budget
        assert len(state["messages"]) < 20
        summary = state["summary"]
        assert summary["compactions"] >= 5
        notes = [n for n in stored_notes(store, ("notes", "chat-1")) if n.unit == "turn"]
        assert len(notes) == summary["messages_summarized"]
        # each note's checkpoint holds the messages the note was made from
        history = {
            s.config["configurable"]["checkpoint_id"]: s for s in graph.get_state_history(config)
        }
        for note in notes:
            checkpoint = history[note.provenance.checkpoint_id]
            ids = {m.id for m in checkpoint.values["messages"]}
            assert set(note.provenance.message_ids) <= ids
            assert note.provenance.thread_id == "chat-1"
            assert note.provenance.said_from is not None or note.text.startswith("Assistant")

    with open_checkpointer(url) as saver:
        graph = chat_graph(GenericFakeChatModel(messages=replies(20)), budget).compile(
            checkpointer=saver, store=store
        )
        assert graph.get_state(config).values["summary"] == summary
        for turn in range(40, 60):
            state = graph.invoke({"messages": [HumanMessage(f"Fact {turn} is new.")]}, config)
            assert count_tokens_approximately(state["messages"]) <= budget
        assert state["summary"]["compactions"] > summary["compactions"]
        assert state["summary"]["tokens_saved_total"] > summary["tokens_saved_total"]
    assert len(stored_notes(store, ("notes", "chat-1"))) > len(notes)


STRICT_SCRIPT = textwrap.dedent(
    """
    import dataclasses, logging, sys
    from typing import Any, NotRequired
    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.store.memory import InMemoryStore
    from statekeeper.checkpointers import open_checkpointer
    from statekeeper.memory.node import SummarizationNode, SummaryState

    @dataclasses.dataclass
    class Legacy:  # how LangMem keeps its running summary: in an untyped dict
        text: str

    class State(SummaryState):
        context: NotRequired[dict[str, Any]]

    saver_name, legacy = sys.argv[1], sys.argv[2] == "legacy"

    def chat(state):
        reply = AIMessage("Lisbon is sunny and 22 degrees today. " * 3)
        return {"messages": [reply], "context": {"summary": Legacy("x")} if legacy else {}}

    builder = StateGraph(State)
    builder.add_node("chat", chat)
    builder.add_node("summarize", SummarizationNode(budget_tokens=150))
    builder.add_edge(START, "chat")
    builder.add_edge("chat", "summarize")
    builder.add_edge("summarize", END)
    saver = InMemorySaver() if saver_name == "InMemorySaver" else open_checkpointer(saver_name)
    graph = builder.compile(checkpointer=saver, store=InMemoryStore())
    config = {"configurable": {"thread_id": "t"}}
    for i in range(10):
        graph.invoke({"messages": [HumanMessage(f"Tell me about Porto, question {i}.")]}, config)
    summary = graph.get_state(config).values["summary"]
    assert type(summary) is dict and summary["compactions"] >= 2, summary
    print("ok")
    """
)


def run_strict(saver: str, variant: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LANGGRAPH_STRICT_MSGPACK": "true"}
    return subprocess.run(
        [sys.executable, "-c", STRICT_SCRIPT, saver, variant],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("saver", ["memory://", "InMemorySaver"])
def test_the_summary_reloads_under_strict_msgpack(saver: str) -> None:
    done = run_strict(saver, "plain")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    for word in ("unregistered", "Blocked", "blocked", "not in allowed"):
        assert word not in done.stderr


def test_the_strict_check_sees_a_blocked_type() -> None:
    done = run_strict("InMemorySaver", "legacy")  # the harness must see what LangMem hits
    assert done.returncode == 0, done.stderr
    assert "Blocked deserialization" in done.stderr

"""``RetrievalNode`` in real graphs (TypedDict and pydantic state, the graph's store or its
own), its namespaces, and ``format_memories``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Annotated, Any

import ormsgpack
import pydantic
import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.message import add_messages

from statekeeper.checkpointers import open_checkpointer
from statekeeper.errors import ConfigurationError
from statekeeper.memory.node import notes_namespace
from statekeeper.memory.recall import Limits, recall
from statekeeper.memory.retrieval import RetrievalNode, format_memories, last_human_text
from statekeeper.memory.store import SqliteStore, open_store
from tests.memory.conftest import ANA, make_note, put_corpus


class ChatState(MessagesState):
    memories: list[dict[str, Any]]


class PydanticState(pydantic.BaseModel):
    messages: Annotated[list[AnyMessage], add_messages] = []
    memories: list[dict[str, Any]] = []


@pytest.fixture
def shared() -> Iterator[SqliteStore]:
    with open_store("memory://") as store:
        put_corpus(store)
        yield store


def graph_with(node: RetrievalNode, state: Any = ChatState, **compile: Any) -> Any:
    builder = StateGraph(state)
    builder.add_node("recall", node)
    builder.add_edge(START, "recall")
    return builder.compile(**compile)


def ask(graph: Any, text: str, **configurable: Any) -> list[dict[str, Any]]:
    config = {"configurable": {"thread_id": "t", **configurable}}
    values = graph.invoke({"messages": [HumanMessage(text)]}, config)
    return values["memories"] if isinstance(values, dict) else values.memories


def test_the_node_recalls_into_the_state_with_the_graphs_store(shared: SqliteStore) -> None:
    graph = graph_with(RetrievalNode(namespace=ANA), store=shared)
    memories = ask(graph, "When am I flying to Dublin?")
    expected = recall(shared, ANA, "When am I flying to Dublin?")
    assert [m["key"] for m in memories] == [hit.key for hit in expected]
    assert memories
    first = memories[0]
    assert first["text"].startswith("Ana booked flights to Dublin")
    assert set(first) == {
        "text",
        "topics",
        "score",
        "freshness",
        "key",
        "namespace",
        "provenance",
        "observed_at",
        "valid_from",
        "valid_to",
        "subject",
        "attribute",
        "superseded_by",
        "conflicts",
        "unit",
        "dates",
    }
    assert first["unit"] == "turn"
    assert first["dates"] == []
    assert first["provenance"]["thread_id"]
    assert first["provenance"]["message_ids"]
    assert ask(graph, "Explain quantum entanglement") == []  # nothing relevant: nothing


def test_the_node_works_with_a_pydantic_state(shared: SqliteStore) -> None:
    graph = graph_with(
        RetrievalNode(namespace=ANA, limits=Limits(k=1)), PydanticState, store=shared
    )
    memories = ask(graph, "Which hospital do I work at?")
    assert len(memories) == 1
    assert "hospital" in memories[0]["text"]


def test_the_state_holds_plain_data_that_reloads_strictly(
    shared: SqliteStore, tmp_path: Any
) -> None:
    """No msgpack extension type in the memories: strict mode has nothing to refuse."""
    with open_checkpointer(f"sqlite:///{tmp_path}/cp.db") as saver:
        graph = graph_with(RetrievalNode(namespace=ANA), store=shared, checkpointer=saver)
        memories = ask(graph, "Where does my sister live?")
        config: RunnableConfig = {"configurable": {"thread_id": "t"}}
        assert graph.get_state(config).values["memories"] == memories
    kind, data = JsonPlusSerializer().dumps_typed(memories)
    assert kind == "msgpack"
    assert ormsgpack.unpackb(data) == memories
    assert json.loads(json.dumps(memories)) == memories


def test_the_node_can_have_its_own_store(shared: SqliteStore) -> None:
    with open_store("memory://") as graphs_store:  # empty: the node must not use it
        graph = graph_with(RetrievalNode(store=shared, namespace=ANA), store=graphs_store)
        assert "dentist" in ask(graph, "When is my dentist appointment?")[0]["text"]
    graph = graph_with(RetrievalNode(store=shared, namespace=ANA))  # no store at all
    assert "dentist" in ask(graph, "When is my dentist appointment?")[0]["text"]


def test_without_a_store_the_node_says_what_to_do() -> None:
    graph = graph_with(RetrievalNode(namespace=ANA))
    with pytest.raises(ConfigurationError, match="compile the graph with store"):
        ask(graph, "anything at all")


def test_namespace_templates_callables_and_the_thread_default(shared: SqliteStore) -> None:
    note = make_note("Leo is a vegetarian and does not eat fish", thread_id="chat.1")
    shared.put(("users", "leo%2Efan"), note.key, note.to_value())
    shared.put(notes_namespace("chat.1"), note.key, note.to_value())
    by_user = graph_with(RetrievalNode(namespace=("users", "{user_id}")), store=shared)
    assert ask(by_user, "Is Leo a vegetarian?", user_id="leo.fan")[0]["key"] == note.key
    with pytest.raises(ConfigurationError, match="user_id"):
        ask(by_user, "Is Leo a vegetarian?")
    by_function = graph_with(RetrievalNode(namespace=lambda config: ("users", "ana")), store=shared)
    assert ask(by_function, "Is Leo a vegetarian?")[0]["text"].startswith("Leo is")
    by_thread = graph_with(RetrievalNode(), store=shared)
    config = {"configurable": {"thread_id": "chat.1"}}
    values = by_thread.invoke({"messages": [HumanMessage("Is Leo a vegetarian?")]}, config)
    assert [m["key"] for m in values["memories"]] == [note.key]


def test_the_query_is_the_last_human_message_or_a_function(shared: SqliteStore) -> None:
    state = {
        "messages": [
            HumanMessage("Where does my sister live?"),
            AIMessage("In Dublin."),
            {"role": "user", "content": [{"type": "text", "text": "And my laptop?"}]},
            AIMessage("A ThinkPad."),
        ]
    }
    assert last_human_text(state) == "And my laptop?"
    assert last_human_text({"messages": [("user", "hi"), AIMessage("hello")]}) == "hi"
    assert last_human_text({"messages": [AIMessage("only me")]}) is None
    assert last_human_text(PydanticState(messages=[HumanMessage("typed")])) == "typed"
    node = RetrievalNode(store=shared, namespace=ANA, query=lambda s: "Tomasz one-on-one")
    (memory,) = node(state, {"configurable": {}})["memories"]
    assert "Tomasz" in memory["text"]
    silent = RetrievalNode(store=shared, namespace=ANA)
    assert silent({"messages": [AIMessage("no human yet")]}, {"configurable": {}}) == {
        "memories": []
    }


def test_bad_node_options_are_refused() -> None:
    with pytest.raises(ConfigurationError):
        RetrievalNode(namespace=ANA, limits=Limits(k=0))
    with pytest.raises(ConfigurationError):
        RetrievalNode(namespace=ANA, limits=Limits(min_score=2))
    with pytest.raises(ConfigurationError):
        RetrievalNode(namespace=ANA, store="memory://")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        RetrievalNode(namespace=ANA, key="")


def test_format_memories(shared: SqliteStore) -> None:
    hits = recall(shared, ANA, "When am I flying to Dublin to see Maya?")
    text = format_memories(hits)
    lines = text.splitlines()
    assert len(lines) == len(hits) >= 2
    assert (
        "- Ana booked flights to Dublin for 3-7 June to visit Maya. (thread t-2, said 2024-05-30)"
    ) in lines
    assert format_memories([hit.to_dict() for hit in hits]) == text
    assert format_memories([]) == ""
    undated = {"text": "x", "provenance": {"thread_id": "t", "created_at": "2024-01-02T03:04"}}
    assert format_memories([undated]) == "- x (thread t, noted 2024-01-02)"
    spanning = {
        "text": "y",
        "provenance": {"thread_id": "t", "said_from": "2024-01-01", "said_to": "2024-01-03"},
    }
    assert format_memories([spanning]) == "- y (thread t, said 2024-01-01 to 2024-01-03)"

"""``VersionedState`` as a LangGraph state schema, and its migration registry."""

from __future__ import annotations

import operator
from typing import Annotated, Any, ClassVar

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, RemoveMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from pydantic import BaseModel, Field

from statekeeper.checkpointers import open_checkpointer
from statekeeper.errors import ConfigurationError, StateValidationError
from statekeeper.graphs import VersionedState


class Address(BaseModel):
    city: str
    zip: Annotated[str, Field(pattern=r"^\d{5}$")]


class Chat(VersionedState):
    schema_version: ClassVar[int] = 3
    messages: Annotated[list[AnyMessage], add_messages] = []
    tally: Annotated[list[int], operator.add] = []
    addresses: list[Address] = []
    topic: str


@Chat.migration(from_version=1)
def _subject_to_topic(values: dict[str, Any]) -> dict[str, Any]:
    values["topic"] = values.pop("subject")
    return values


@Chat.migration(from_version=2)
def _tally_to_ints(values: dict[str, Any]) -> dict[str, Any]:
    values["tally"] = [int(x) for x in values.get("tally", [])]
    return values


def reply(state: Chat) -> dict[str, Any]:
    assert isinstance(state, Chat)
    return {"messages": [AIMessage(f"about {state.topic}", id="ai-1")], "tally": [1]}


def prune(state: Chat) -> dict[str, Any]:
    return {"messages": [RemoveMessage(id="h-1")], "tally": [2]}


def test_is_a_langgraph_state_schema_with_reducers() -> None:
    builder = StateGraph(Chat)
    builder.add_node("reply", reply)
    builder.add_node("prune", prune)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", "prune")
    builder.add_edge("prune", END)
    with open_checkpointer("memory://") as saver:
        graph = builder.compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": "t"}}
        out = graph.invoke({"topic": "tides", "messages": [HumanMessage("hi", id="h-1")]}, config)
        # add_messages appended then removed by id; operator.add concatenated
        assert [m.id for m in out["messages"]] == ["ai-1"]
        assert out["tally"] == [1, 2]
        assert isinstance(out["messages"][0], AIMessage)
    # the version is configuration, not state: no channel, not in the fields
    assert "schema_version" not in graph.channels
    assert "_migrations" not in graph.channels
    assert "schema_version" not in Chat.model_fields
    assert Chat.schema_version == 3


def test_upgrade_runs_every_step_and_leaves_the_input_alone() -> None:
    stored = {"subject": "tides", "tally": ["1", "2"]}
    assert Chat.upgrade(stored, 1) == {"topic": "tides", "tally": [1, 2]}
    assert stored == {"subject": "tides", "tally": ["1", "2"]}
    assert Chat.upgrade({"topic": "x", "tally": ["4"]}, 2) == {"topic": "x", "tally": [4]}
    assert Chat.upgrade({"topic": "x"}, 3) == {"topic": "x"}


def test_load_validates_after_migrating() -> None:
    state, values = Chat.load({"subject": "tides", "tally": ["7"]}, 1)
    assert isinstance(state, Chat)
    assert (state.topic, state.tally) == ("tides", [7])
    assert values == {"topic": "tides", "tally": [7]}


def test_invalid_state_names_thread_checkpoint_and_field_path() -> None:
    bad = {"topic": "x", "addresses": [{"city": "Oslo", "zip": "01234"}, {"city": "Rome"}]}
    with pytest.raises(StateValidationError) as caught:
        Chat.load(bad, 3, thread_id="t-1", checkpoint_id="c-9")
    err = caught.value
    assert (err.thread_id, err.checkpoint_id, err.field) == ("t-1", "c-9", "addresses.1.zip")
    assert "'t-1'" in str(err)
    assert "'c-9'" in str(err)
    assert "'addresses.1.zip'" in str(err)
    assert "schema version 3" in str(err)


def test_missing_migration_step_is_a_validation_error() -> None:
    class Partial(VersionedState):
        schema_version: ClassVar[int] = 3
        topic: str

    @Partial.migration(from_version=2)
    def _two_to_three(values: dict[str, Any]) -> dict[str, Any]:
        return values

    with pytest.raises(StateValidationError, match="no migration from version 1 to 2") as e:
        Partial.load({"topic": "x"}, 1, thread_id="t", checkpoint_id="c")
    assert (e.value.thread_id, e.value.checkpoint_id, e.value.field) == ("t", "c", None)
    assert Partial.load({"topic": "x"}, 2)[0].topic == "x"


def test_failing_migration_and_newer_version_are_validation_errors() -> None:
    with pytest.raises(StateValidationError, match=r"_tally_to_ints .* ValueError") as e:
        Chat.upgrade({"topic": "x", "tally": ["many"]}, 2, thread_id="t")
    assert isinstance(e.value.__cause__, ValueError)
    with pytest.raises(StateValidationError, match="newer than this code's version 3"):
        Chat.upgrade({"topic": "x"}, 4)


def test_migrations_are_registered_per_class_and_checked() -> None:
    class Other(VersionedState):
        schema_version: ClassVar[int] = 2
        topic: str

    with pytest.raises(StateValidationError, match="no migration from version 1"):
        Other.upgrade({"subject": "x"}, 1)  # Chat's migrations are not Other's
    with pytest.raises(ConfigurationError, match="must start at 1 to 1"):
        Other.migration(from_version=2)
    with pytest.raises(ConfigurationError, match="must start at 1 to 2"):
        Chat.migration(from_version=0)
    with pytest.raises(ConfigurationError, match="already has a migration from version 1"):
        Chat.migration(from_version=1)
    with pytest.raises(ConfigurationError, match="must be an int >= 1"):

        class Broken(VersionedState):
            schema_version: ClassVar[int] = 0


def test_a_failing_migrations_message_is_one_line() -> None:
    class Lines(VersionedState):
        schema_version: ClassVar[int] = 2
        topic: str

    @Lines.migration(from_version=1)
    def _fails(values: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("bad\nmigration")

    with pytest.raises(StateValidationError, match="RuntimeError: bad migration") as e:
        Lines.load({"topic": "x"}, 1, thread_id="t")
    assert "\n" not in str(e.value)
    assert isinstance(e.value.__cause__, RuntimeError)


def test_keys_a_migration_returns_must_be_channels_of_the_state() -> None:
    # _subject_to_topic passes every other key on: "zzz" and a removed "subject2" would be
    # stored as channels no field reads
    with pytest.raises(StateValidationError) as e:
        Chat.load({"subject": "x", "zzz": 1, "subject2": "y"}, 1, thread_id="t", checkpoint_id="c")
    message = str(e.value)
    assert "migration _tally_to_ints from version 2 to 3 returned keys" in message
    assert "not channels of Chat: 'zzz', 'subject2'" in message
    assert "\n" not in message
    assert (e.value.thread_id, e.value.checkpoint_id, e.value.field) == ("t", "c", "zzz")
    # the graph's other channels (a node's private state) may be returned
    state, values = Chat.load({"subject": "x", "zzz": 1}, 1, channels=("zzz",))
    assert (state.topic, values["zzz"]) == ("x", 1)
    # state already at the current version is not migrated, so not checked so
    assert Chat.load({"topic": "x", "zzz": 1}, 3)[1] == {"topic": "x", "zzz": 1}

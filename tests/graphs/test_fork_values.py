"""``Runner.fork(values=...)``: a fork with edited state (the inspector's fork form)."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from statekeeper.errors import StateValidationError
from statekeeper.graphs import Runner
from tests.graphs.conftest import V1, V1_INPUT, Modules, checkpoints


def _after_intake(runner: Runner, saver: Any, modules: Modules) -> tuple[str, dict[str, Any]]:
    """Run to the review, answer it, and return the checkpoint after intake (triage is
    next) with its stored state values."""
    runner.run(modules.write(V1), V1_INPUT, thread_id="t")
    runner.resume("t", answer="yes")
    [checkpoint_id] = [cid for cid, meta in checkpoints(saver, "t") if meta["step"] == 1]
    config = {
        "configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": checkpoint_id}
    }
    values = dict(saver.get_tuple(config).checkpoint["channel_values"])
    return checkpoint_id, {
        k: v for k, v in values.items() if k.isidentifier() and not k.startswith("__")
    }


def test_fork_with_edited_values_runs_on_from_them(
    runner: Runner, saver: Any, modules: Modules
) -> None:
    source, values = _after_intake(runner, saver, modules)
    fork = runner.fork("t", source, values={**values, "priority": "5"})
    assert fork.next == ("triage",)
    head = saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
    assert head.metadata["source"] == "fork"
    assert head.metadata["statekeeper_schema_version"] == 1
    assert head.checkpoint["channel_values"]["priority"] == "5"
    assert isinstance(head.checkpoint["channel_values"]["messages"][0], HumanMessage)
    runner.resume("t")
    done = runner.resume("t", answer="no")
    assert done.values["notes"] == ["intake", "triage p5", "review no", "closed"]


def test_edited_values_given_as_json_are_validated_into_the_schema(
    runner: Runner, saver: Any, modules: Modules
) -> None:
    source, values = _after_intake(runner, saver, modules)
    edited = {**values, "messages": [{"type": "human", "content": "help bob"}], "customer": "bob"}
    runner.fork("t", source, values=edited, to_thread="copy")
    head = saver.get_tuple({"configurable": {"thread_id": "copy", "checkpoint_ns": ""}})
    [message] = head.checkpoint["channel_values"]["messages"]
    assert isinstance(message, HumanMessage)
    assert message.content == "help bob"
    assert head.metadata["statekeeper_forked_from_thread"] == "t"


def test_invalid_edited_values_write_nothing(runner: Runner, saver: Any, modules: Modules) -> None:
    source, values = _after_intake(runner, saver, modules)
    before = checkpoints(saver, "t")
    with pytest.raises(StateValidationError, match="priority"):
        runner.fork("t", source, values={**values, "priority": ["not", "text"]})
    del values["customer"]
    with pytest.raises(StateValidationError, match="customer"):
        runner.fork("t", source, values=values, to_thread="copy")
    assert checkpoints(saver, "t") == before
    assert checkpoints(saver, "copy") == []


@pytest.mark.parametrize(
    "message",
    [{"role": "user", "content": "added"}, {"bogus": 1}],
    ids=["role-not-type", "no-type"],
)
def test_a_message_without_a_type_is_a_state_validation_error(
    runner: Runner, saver: Any, modules: Modules, message: dict[str, Any]
) -> None:
    """langchain's message union raises TypeError, which pydantic does not wrap."""
    source, values = _after_intake(runner, saver, modules)
    before = checkpoints(saver, "t")
    with pytest.raises(StateValidationError, match="field 'messages': TypeError") as raised:
        runner.fork("t", source, values={**values, "messages": [message]})
    assert raised.value.field == "messages"
    assert "\n" not in str(raised.value)
    assert checkpoints(saver, "t") == before


@pytest.mark.parametrize("key", ["__start__", "branch:to:triage", "nosuch"])
def test_a_key_that_is_not_a_state_field_is_refused(
    runner: Runner, saver: Any, modules: Modules, key: str
) -> None:
    source, values = _after_intake(runner, saver, modules)
    before = checkpoints(saver, "t")
    for target in ("t", "copy"):
        with pytest.raises(StateValidationError) as raised:
            runner.fork("t", source, values={**values, key: 1}, to_thread=target)
        message = str(raised.value)
        assert f"not channels of Ticket: {key!r} (it has: 'messages', 'notes'," in message
        assert raised.value.field == key
        assert "\n" not in message
    assert checkpoints(saver, "t") == before
    assert checkpoints(saver, "copy") == []


TYPED = """
import operator
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict as CheckableTypedDict  # pydantic's, before 3.12


class Step(CheckableTypedDict):
    name: str


class Log(TypedDict):
    log: Annotated[list[str], operator.add]
    count: int
    last: Step


class Scratch(TypedDict):
    scratch: list[int]


def first(state: Log) -> Scratch:
    return {"scratch": [1]}


def second(state: Scratch) -> dict[str, Any]:
    return {"log": ["second"], "count": 1, "last": {"name": "second", "by": "node"}}


def third(state: Log) -> dict[str, Any]:
    return {"log": [f"third {state['count']}"]}


builder = StateGraph(Log)
for node in (first, second, third):
    builder.add_node(node.__name__, node)
builder.add_edge(START, "first")
builder.add_edge("first", "second")
builder.add_edge("second", "third")
builder.add_edge("third", END)
graph = builder
"""


def _typed_before_third(runner: Runner, saver: Any, modules: Modules) -> str:
    runner.run(modules.write(TYPED), {"log": ["start"]}, thread_id="t")
    [checkpoint_id] = [cid for cid, meta in checkpoints(saver, "t") if meta["step"] == 2]
    return checkpoint_id


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ({"log": "notalist"}, "against Log: field 'log': Input should be a valid list"),
        ({"count": "x"}, "field 'count': Input should be a valid integer"),
        ({"last": {"nome": "x"}}, "field 'last.name': Field required"),
        ({"scratch": ["x"]}, "field 'scratch.0': Input should be a valid integer"),
        ({"__start__": {"log": []}}, "not channels of Log: '__start__' \\(it has: 'log', "),
        ({"nosuch": 1}, "it has: 'log', 'count', 'last', 'scratch'\\)"),
    ],
)
def test_a_typed_dict_state_is_checked_before_anything_is_written(
    runner: Runner, saver: Any, modules: Modules, values: dict[str, Any], match: str
) -> None:
    source = _typed_before_third(runner, saver, modules)
    before = checkpoints(saver, "t")
    with pytest.raises(StateValidationError, match=match):
        runner.fork("t", source, values=values)
    assert checkpoints(saver, "t") == before


def test_a_typed_dict_state_that_fits_is_stored_as_given(
    runner: Runner, saver: Any, modules: Modules
) -> None:
    source = _typed_before_third(runner, saver, modules)
    # plain dicts stay dicts (the extra key too); the private channel is kept
    last = {"name": "edited", "by": "hand"}
    values = {"log": ["start", "second"], "count": 7, "last": last, "scratch": [1]}
    fork = runner.fork("t", source, values=values)
    assert fork.next == ("third",)
    assert runner.state("t") == values
    assert runner.resume("t").values["log"] == ["start", "second", "third 7"]

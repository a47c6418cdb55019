"""``skeleton_reader``: checkpoints read without building their objects, for the
inspector's thread tree and checkpoint references (``@5``, prefixes)."""

from __future__ import annotations

import operator
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Any, TypedDict

import ormsgpack
import pytest
from langchain_core.messages import AIMessage, AnyMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Send

from statekeeper._storage.serde import safe_serde, skeleton_reader
from statekeeper.checkpointers import open_checkpointer
from statekeeper.errors import SerializationError
from statekeeper.threads import pending_nodes


class _State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    log: Annotated[list[str], operator.add]


def _graph() -> StateGraph[Any]:
    """Send packets, a join of two nodes (its value: a set), and messages."""
    builder = StateGraph(_State)
    builder.add_node("start", lambda s: {"messages": [AIMessage("hi", id="m1")], "log": ["s"]})
    builder.add_node("work", lambda packet: {"log": [f"w{packet['n']}"]})
    builder.add_node("a", lambda s: {"log": ["a"]})
    builder.add_node("x", lambda s: {"log": ["x"]})
    builder.add_node("b", lambda s: {"log": ["b"]})
    builder.add_node("c", lambda s: {"messages": [AIMessage("bye", id="m2")], "log": ["c"]})
    builder.add_edge(START, "start")
    builder.add_conditional_edges("start", lambda s: [Send("work", {"n": n}) for n in (1, 2)])
    builder.add_edge("work", "a")
    builder.add_edge("work", "x")
    builder.add_edge("x", "b")
    builder.add_edge(["a", "b"], "c")
    return builder


def test_a_skeleton_read_sees_the_graph_where_it_stands_without_its_messages(
    tmp_path: Path,
) -> None:
    with open_checkpointer(f"sqlite:///{tmp_path}/state.db") as saver:
        config: Any = {"configurable": {"thread_id": "t"}}
        done = _graph().compile(checkpointer=saver).invoke({"messages": [], "log": []}, config)
        assert done["log"][-1] == "c"
        whole = list(saver.list(config))
        skeleton = list(skeleton_reader(saver).list(config))
    assert [t.checkpoint["id"] for t in skeleton] == [t.checkpoint["id"] for t in whole]
    assert [t.metadata for t in skeleton] == [t.metadata for t in whole]
    # where each checkpoint stands: Send packets and the join's set of writers rebuilt
    nexts = [pending_nodes(t.checkpoint) for t in whole]
    assert [pending_nodes(t.checkpoint) for t in skeleton] == nexts
    assert ("work", "work") in nexts
    joins = [t.checkpoint["channel_values"].get("join:a+b:c") for t in skeleton]
    assert joins == [t.checkpoint["channel_values"].get("join:a+b:c") for t in whole]
    assert {"a", "b"} in joins
    # ...and no message built
    assert whole[0].checkpoint["channel_values"]["messages"][-1].content == "bye"
    assert skeleton[0].checkpoint["channel_values"]["messages"] == [None, None]


def test_a_skeleton_read_is_never_taken_for_the_list_it_read(tmp_path: Path) -> None:
    """A list read through a skeleton reader is ``[None, None]``. Had the checkpointer
    remembered those ``None`` as the stored list's elements, a next list starting with
    two real ``None`` would pass for an append to it, and read back with the messages."""
    with open_checkpointer(f"sqlite:///{tmp_path}/state.db") as saver:
        base: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        first = empty_checkpoint()
        first["channel_values"] = {"items": [AIMessage("a", id="1"), AIMessage("b", id="2")]}
        first["channel_versions"] = {"items": saver.get_next_version(None, None)}
        config = saver.put(base, first, {"step": 0}, first["channel_versions"])
        read = skeleton_reader(saver).get_tuple(config)  # served from what this process wrote
        assert read is not None
        assert read.checkpoint["channel_values"]["items"] == [None, None]
        second = empty_checkpoint()
        second["channel_values"] = {"items": [None, None, AIMessage("c", id="3")]}
        version = saver.get_next_version(first["channel_versions"]["items"], None)
        second["channel_versions"] = {"items": version}
        config = saver.put(config, second, {"step": 1}, second["channel_versions"])
        stored = saver.get_tuple(config)
    assert stored is not None
    assert stored.checkpoint["channel_values"]["items"] == [None, None, AIMessage("c", id="3")]


@pytest.mark.parametrize(
    ("data", "what"),
    [
        (ormsgpack.packb([1, ormsgpack.Ext(42, b"xyz")]), "code 42"),
        (ormsgpack.packb({"a": ormsgpack.Ext(3, b"garbage")}), r"\(code 3\)"),
    ],
    ids=["unknown-code", "bad-data"],
)
def test_a_skeleton_read_refuses_what_a_whole_read_refuses(data: bytes, what: str) -> None:
    """Objects are left unbuilt, not unread: bytes no write makes are refused, as the
    checkpointer's own serde refuses them (LangGraph's reads them as None)."""
    reader = skeleton_reader(SimpleNamespace(serde=safe_serde())).serde
    for serde in (safe_serde(), reader):
        with pytest.raises(SerializationError, match=f"holds .*{what}.* refused rather than read"):
            serde.loads_typed(("msgpack", data))

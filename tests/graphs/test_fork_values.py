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

"""``~N`` on a history whose stored parent links form a cycle (what an import accepted
before it refused them, or a saver that never checked): resolution stops at the first
checkpoint it meets twice, naming it, instead of going round (or answering at all)."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from statekeeper.checkpointers import open_checkpointer
from statekeeper.errors import ThreadNotFoundError
from statekeeper.refs import resolve_checkpoint


def _put(saver: Any, thread_id: str, checkpoint_id: str, parent_id: str, step: int) -> None:
    checkpoint = empty_checkpoint()
    checkpoint["id"] = checkpoint_id
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    config["configurable"]["checkpoint_id"] = parent_id
    saver.put(config, checkpoint, {"step": step}, {})


@pytest.mark.parametrize("ref", ["~2", "1f0-a~1", "~50", "~1~1~1"])
def test_its_own_parent(ref: str) -> None:
    with open_checkpointer("memory://") as saver:
        _put(saver, "t", "1f0-a", "1f0-a", 0)
        _put(saver, "t", "1f0-b", "1f0-a", 1)
        with pytest.raises(ThreadNotFoundError, match=r"'1f0-a' .* is its own ancestor"):
            resolve_checkpoint(saver, "t", ref)
        assert resolve_checkpoint(saver, "t", "1f0-b~1").checkpoint["id"] == "1f0-a"


@pytest.mark.parametrize("ref", ["~2", "~1~1", "~7"])
def test_a_cycle_of_two(ref: str) -> None:
    with open_checkpointer("memory://") as saver:
        _put(saver, "t", "1f0-a", "1f0-b", 0)
        _put(saver, "t", "1f0-b", "1f0-a", 1)
        with pytest.raises(ThreadNotFoundError, match=r"'1f0-b' .* is its own ancestor"):
            resolve_checkpoint(saver, "t", ref)
        assert resolve_checkpoint(saver, "t", "~1").checkpoint["id"] == "1f0-a"

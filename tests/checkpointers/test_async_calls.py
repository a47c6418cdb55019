"""The async API's calls of a turn (``aget_tuple``, ``aput``, ``aput_writes``) on every
backend: many at once from one event loop all land, and none hops to the loop's default
executor (``asyncio.to_thread``): every backend serves them on one thread of its own."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from statekeeper.checkpointers import open_checkpointer


def _config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def test_a_turns_async_calls_land_without_a_hop_to_the_default_executor(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a turn's async call hopped to asyncio.to_thread")

    async def main() -> None:
        async with open_checkpointer(url) as saver:
            monkeypatch.setattr(asyncio, "to_thread", refuse)
            threads = [f"t{i}" for i in range(30)]
            stored = await asyncio.gather(
                *(saver.aput(_config(t), empty_checkpoint(), {"n": t}, {}) for t in threads)
            )
            await asyncio.gather(
                *(saver.aput_writes(c, [("a", i)], "task") for i, c in enumerate(stored))
            )
            found = await asyncio.gather(*(saver.aget_tuple(_config(t)) for t in threads))
            monkeypatch.undo()
        assert [f.metadata["n"] for f in found] == threads
        assert [f.pending_writes for f in found] == [[("task", "a", i)] for i in range(30)]

    asyncio.run(main())

"""The async API's calls of a turn (``aget_tuple``, ``aput``, ``aput_writes``) on every
backend: many at once from one event loop all land, and none hops to the loop's default
executor (``asyncio.to_thread``): every backend serves them on one thread of its own,
which also compresses what they store."""

from __future__ import annotations

import asyncio
import threading
import zlib
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


def test_an_async_turn_compresses_on_the_storing_thread_not_the_loops(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """zlib lets go of the interpreter lock at every call, which on the event loop's
    thread hands the loop over to the thread that stores: ``aput`` and ``aput_writes``
    leave compressing the checkpoint and the writes to that thread."""
    compressed_on: list[int] = []
    compressobj = zlib.compressobj

    def spy(*args: Any, **kwargs: Any) -> Any:
        compressed_on.append(threading.get_ident())
        return compressobj(*args, **kwargs)

    checkpoint = empty_checkpoint()
    # over every backend's threshold (4 KB on PostgreSQL), and compressible
    checkpoint["versions_seen"] = {"node": {f"channel-{i:04d}": f"{i:032}.0.5" for i in range(300)}}
    large = "a long and compressible pending write " * 200

    async def main() -> None:
        async with open_checkpointer(url) as saver:
            monkeypatch.setattr(zlib, "compressobj", spy)
            stored = await saver.aput(_config("t"), checkpoint, {}, {})
            await saver.aput_writes(stored, [("a", large)], "task")
            monkeypatch.undo()
            found = await saver.aget_tuple(_config("t"))
        assert found is not None
        assert found.checkpoint["versions_seen"] == checkpoint["versions_seen"]
        assert found.pending_writes == [("task", "a", large)]
        assert compressed_on  # the checkpoint and the write were compressed...
        assert loop_thread not in compressed_on  # ...but not on the loop's thread

    loop_thread = threading.get_ident()  # asyncio.run runs the loop on this thread
    asyncio.run(main())

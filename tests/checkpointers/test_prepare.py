"""Preparing a put or a put_writes with compression deferred (the async API's way) gives,
once packed, exactly the record prepared eagerly; and it checks everything up front."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from statekeeper.checkpointers.prepare import Packing, prepare_put, prepare_writes
from statekeeper.errors import SerializationError

SERDE = JsonPlusSerializer()
CONFIG: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "c"}}
WRITES = [("small", "short"), ("large", "a compressible pending write " * 40), ("n", 1)]


def _checkpoint() -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["versions_seen"] = {"node": {f"channel-{i}": f"{i:032}.0.5" for i in range(40)}}
    return checkpoint


def test_a_deferred_put_packs_into_the_eager_one() -> None:
    checkpoint = _checkpoint()
    eager = prepare_put(SERDE, Packing(True, 256), CONFIG, checkpoint, {}, {})
    deferred = prepare_put(SERDE, Packing(True, 256, defer=True), CONFIG, checkpoint, {}, {})
    assert eager.checkpoint.codec == "zlib+d1"  # large enough to be compressed
    assert deferred.checkpoint.codec == ""
    assert deferred.deferred == 256
    packed = deferred.packed()
    assert packed == eager
    assert packed.deferred is None
    assert packed.packed() is packed


def test_deferred_writes_pack_into_the_eager_ones() -> None:
    eager = prepare_writes(SERDE, Packing(True, 256), CONFIG, WRITES, "task", "")
    deferred = prepare_writes(SERDE, Packing(True, 256, defer=True), CONFIG, WRITES, "task", "")
    assert [w.codec for w in eager.writes] == ["", "zlib+d1", ""]
    assert all(w.codec == "" for w in deferred.writes)
    assert deferred.packed() == eager


def test_without_compression_nothing_is_deferred() -> None:
    off = Packing(False, 256, defer=True)
    put = prepare_put(SERDE, off, CONFIG, _checkpoint(), {}, {})
    writes = prepare_writes(SERDE, off, CONFIG, WRITES, "task", "")
    assert put.deferred is None
    assert writes.deferred is None
    assert put.packed() is put
    assert writes.packed() is writes
    assert put.checkpoint.codec == ""
    assert all(w.codec == "" for w in writes.writes)


def test_a_deferred_write_is_still_checked_before_anything_is_queued() -> None:
    lone_surrogate = "\ud800"
    with pytest.raises(SerializationError, match="lone surrogate"):
        prepare_writes(
            SERDE, Packing(True, 256, defer=True), CONFIG, [("a", lone_surrogate)], "task", ""
        )

"""LangGraph's own conformance suite, with all eight capabilities, on every backend."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from statekeeper.checkpointers import open_checkpointer
from tests.conftest import Backend


async def test_all_eight_capabilities_pass(backend: Backend, tmp_path: Path) -> None:
    @checkpointer_test(name=f"statekeeper-{backend.name}")
    async def factory() -> AsyncIterator[BaseCheckpointSaver[str]]:
        saver = open_checkpointer(backend.url_for(tmp_path))
        try:
            yield saver
        finally:
            saver.close()

    report = await validate(factory)

    detected = {name for name, result in report.results.items() if result.detected}
    assert detected == {cap.value for cap in ALL_CAPABILITIES}
    failures = {
        name: result.failures for name, result in report.results.items() if not result.passed
    }
    assert not failures, failures
    assert all(result.tests_passed > 0 for result in report.results.values())


async def test_redis_asyncio_client_passes_all_eight_capabilities(tmp_path: Path) -> None:
    """The Redis checkpointer's other async path (``async_io="asyncio"``: redis-py's
    asyncio client instead of the sync client in worker threads) meets the same suite."""
    from tests.conftest import BACKENDS

    redis = next(backend for backend in BACKENDS if backend.name == "redis")

    @checkpointer_test(name="statekeeper-redis-asyncio")
    async def factory() -> AsyncIterator[BaseCheckpointSaver[str]]:
        saver = open_checkpointer(redis.url_for(tmp_path), async_io="asyncio")
        try:
            yield saver
        finally:
            saver.close()

    report = await validate(factory)  # the session deletes the keys left (tests/conftest.py)
    failures = {
        name: result.failures for name, result in report.results.items() if not result.passed
    }
    assert not failures, failures
    assert all(result.tests_passed > 0 for result in report.results.values())

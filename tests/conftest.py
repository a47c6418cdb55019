"""Shared fixtures. ``BACKENDS`` is the one list of storage backends that every contract
test — checkpointer and memory store alike — is parametrised over; a new backend joins the
whole suite by adding one entry."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from statekeeper.checkpointers import open_checkpointer


@dataclass(frozen=True)
class Backend:
    name: str
    url_for: Callable[[Path], str]  # tmp_path -> URL
    persistent: bool  # does data survive close() + reopen of the same URL?
    cleanup: Callable[[str], None] | None = None  # URL -> delete what the test stored

    def __str__(self) -> str:
        return self.name


def _redis() -> Any:
    """The session's Redis servers (tests/redis_servers.py), imported on first use."""
    from tests.redis_servers import REDIS

    return REDIS


def _redis_cleanup(url: str) -> None:
    _redis().cleanup(url)


def _postgres() -> Any:
    """The session's PostgreSQL server (tests/postgres_servers.py), found on first use."""
    from tests.postgres_servers import POSTGRES

    return POSTGRES


def _postgres_cleanup(url: str) -> None:
    _postgres().cleanup(url)


BACKENDS = [
    Backend("memory", lambda tmp: "memory://", persistent=False),
    Backend("sqlite", lambda tmp: f"sqlite:///{tmp}/state.db", persistent=True),
    Backend("file", lambda tmp: f"file://{tmp}/files", persistent=True),
    # each URL has its own key prefix; cleanup deletes its keys (see tests/redis_servers.py)
    Backend("redis", lambda tmp: _redis().url("standalone"), True, _redis_cleanup),
    Backend("redis-cluster", lambda tmp: _redis().url("cluster"), True, _redis_cleanup),
    # each URL has its own schema; cleanup drops it (see tests/postgres_servers.py)
    Backend("postgres", lambda tmp: _postgres().url(), True, _postgres_cleanup),
]


@pytest.fixture(params=BACKENDS, ids=str)
def backend(request: pytest.FixtureRequest) -> Backend:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def url(backend: Backend, tmp_path: Path) -> Iterator[str]:
    made = backend.url_for(tmp_path)
    yield made
    if backend.cleanup is not None:
        backend.cleanup(made)


@pytest.fixture(scope="session", autouse=True)
def _redis_servers() -> Iterator[None]:
    """Stops the Redis servers the session started and deletes keys tests left behind;
    drops the PostgreSQL schemas tests left behind."""
    yield
    import sys

    if "tests.redis_servers" in sys.modules:
        _redis().stop()
    if "tests.postgres_servers" in sys.modules:
        _postgres().stop()


@pytest.fixture
def saver(url: str) -> Iterator[Any]:
    with open_checkpointer(url) as opened:
        yield opened

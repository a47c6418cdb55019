"""Shared fixtures. ``BACKENDS`` is the one list of storage backends that every contract
test is parametrised over; a new backend joins the whole suite by adding one entry."""

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

    def __str__(self) -> str:
        return self.name


BACKENDS = [
    Backend("memory", lambda tmp: "memory://", persistent=False),
    Backend("sqlite", lambda tmp: f"sqlite:///{tmp}/state.db", persistent=True),
]


@pytest.fixture(params=BACKENDS, ids=str)
def backend(request: pytest.FixtureRequest) -> Backend:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def url(backend: Backend, tmp_path: Path) -> str:
    return backend.url_for(tmp_path)


@pytest.fixture
def saver(url: str) -> Iterator[Any]:
    with open_checkpointer(url) as opened:
        yield opened

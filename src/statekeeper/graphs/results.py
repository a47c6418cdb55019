"""What the runner's operations return."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from langgraph.types import Interrupt

__all__ = ["ForkResult", "MigrationResult", "RunResult"]


@dataclass(frozen=True)
class RunResult:
    """Where a run stopped. ``status`` is ``"done"`` when no task is left, else
    ``"interrupted"`` (``interrupts`` then holds the questions waiting for an answer,
    each with its ``id`` and ``value``; empty at a static breakpoint). ``values`` is the
    state as a dict, ``checkpoint_id`` the thread's latest checkpoint and ``next`` the
    nodes that run when it is resumed."""

    thread_id: str
    status: Literal["done", "interrupted"]
    interrupts: tuple[Interrupt, ...]
    values: dict[str, Any]
    checkpoint_id: str
    next: tuple[str, ...]


@dataclass(frozen=True)
class ForkResult:
    """A fork: ``checkpoint_id`` in ``thread_id`` is now that thread's latest checkpoint,
    a copy of ``source_checkpoint_id`` of ``source_thread_id``; ``next`` are the nodes
    that run when the thread is resumed."""

    thread_id: str
    checkpoint_id: str
    source_thread_id: str
    source_checkpoint_id: str
    next: tuple[str, ...]


@dataclass(frozen=True)
class MigrationResult:
    """A migration recorded as checkpoint ``checkpoint_id`` of ``thread_id``."""

    thread_id: str
    from_version: int
    to_version: int
    checkpoint_id: str

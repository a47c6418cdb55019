"""The interrupts a resume or a fork answers: which are waiting, which a step asked, and
how they are named in messages (values as JSON, never a Python repr)."""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.types import Interrupt

from statekeeper import _console
from statekeeper.errors import ConfigurationError, NoPendingInterruptError
from statekeeper.graphs._checkpoints import (
    FORKED_FROM_KEY,
    MIGRATED_FROM_KEY,
    asked_interrupts,
    waiting_interrupts,
)

__all__ = ["asked_before_fork", "describe", "one_asker", "still_waiting"]


def describe(interrupts: tuple[Interrupt, ...]) -> str:
    """The interrupts for a message: each id, and its value as JSON (cut when long)."""
    return ", ".join(f"interrupt {i.id} ({_json_value(i.value)})" for i in interrupts)


def _json_value(value: Any, width: int = 200) -> str:
    text = _console.dumps(value, indent=None)
    return text if len(text) <= width else text[: width - 1] + "…"


def one_asker(source: CheckpointTuple, thread_id: str) -> None:
    """Refuse an answer at ``source`` unless exactly one task of the step after it asked
    an ``interrupt()`` (that step runs again from a fork, and asks it again)."""
    askers = {task for task, _ in asked_interrupts(list(source.pending_writes or ()))}
    step = source.metadata.get("step")
    where = f"checkpoint {source.checkpoint['id']!r} (step {step}) of thread {thread_id!r}"
    if not askers:
        raise NoPendingInterruptError(
            f"{where} asked no interrupt(), so there is nothing to answer; fork it without "
            "an answer, or name the checkpoint where the interrupt() was asked",
            thread_id=thread_id,
        )
    if len(askers) > 1:
        raise ConfigurationError(
            f"{len(askers)} tasks asked an interrupt() after {where}; one answer cannot "
            "answer them all: fork without an answer, resume, then answer them by id"
        )


def asked_before_fork(
    saver: BaseCheckpointSaver[Any], saved: CheckpointTuple
) -> tuple[Interrupt, ...]:
    """For a fork that has not run yet: the interrupts its source checkpoint's step asked
    (the copy's parent is that checkpoint, or its copy in the target thread). That step
    runs again and asks them again, so an answer given now answers them."""
    if FORKED_FROM_KEY not in saved.metadata or saved.pending_writes or not saved.parent_config:
        return ()
    parent = saver.get_tuple(saved.parent_config)
    writes = list(parent.pending_writes or ()) if parent is not None else []
    return tuple(found for _, found in asked_interrupts(writes))


def still_waiting(
    saver: BaseCheckpointSaver[Any], saved: CheckpointTuple, pending: tuple[Interrupt, ...]
) -> tuple[Interrupt, ...]:
    """The interrupts waiting for an answer at ``saved``, whose own are ``pending``. A
    migration checkpoint has no pending writes: those waiting are the ones its parent's
    unfinished tasks raised (read from the writes, since the parent's values are not the
    graph's schema), asked again when the super-step re-runs."""
    if pending or MIGRATED_FROM_KEY not in saved.metadata or saved.parent_config is None:
        return pending
    parent = saver.get_tuple(saved.parent_config)
    return waiting_interrupts(parent.pending_writes or []) if parent else ()

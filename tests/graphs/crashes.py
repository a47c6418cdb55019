"""Crashes injected at a checkpointer's writes, and the run they cut short
(``tests/graphs/fanout_graph.py``): shared by the in-process crash matrix and the child
processes that the SIGKILL tests kill."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from statekeeper.errors import AnswerRequiredError, NothingToResumeError, ThreadNotFoundError
from statekeeper.graphs import Runner
from tests.graphs import fanout_graph

THREAD = "crash"
STATE = ("log", "items", "sub_log")


class Killed(BaseException):
    """The process dying at a write: nothing after it runs, no handler catches it."""


@dataclass
class Crash:
    """Counts the calls to ``put`` and ``put_writes``; from call ``at`` on (1-based;
    ``None``: never), each stores nothing and raises :class:`Killed` — or, with
    ``sigkill``, kills the process outright."""

    at: int | None = None
    sigkill: bool = False
    calls: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def check(self, what: str) -> None:
        with self.lock:  # LangGraph stores a step's writes from several threads
            self.calls.append(what)
            dead = self.at is not None and len(self.calls) >= self.at
        if dead and self.sigkill:
            os.kill(os.getpid(), signal.SIGKILL)
        if dead:
            raise Killed


@contextlib.contextmanager
def crashing(saver: Any, crash: Crash) -> Iterator[None]:
    """``saver`` with its writes going through ``crash`` for the ``with`` block."""
    real_put, real_writes = saver.put, saver.put_writes

    def put(config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        crash.check(f"put {config['configurable'].get('checkpoint_ns', '')}".strip())
        return real_put(config, checkpoint, metadata, new_versions)

    def put_writes(config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        crash.check(f"put_writes {' '.join(channel for channel, _ in writes)}")
        real_writes(config, writes, task_id, task_path)

    saver.put, saver.put_writes = put, put_writes
    try:
        yield
    finally:
        del saver.put, saver.put_writes


def drive(runner: Runner) -> None:
    """The whole run: start it, then answer the interrupt it stops at."""
    first = runner.run(fanout_graph.REF, fanout_graph.INPUT, thread_id=THREAD)
    assert first.status == "interrupted", first
    done = runner.resume(THREAD, answer=fanout_graph.ANSWER)
    assert done.status == "done", done


def recover(runner: Runner) -> list[str]:
    """Resume the thread by id until it is finished, as an operator would (answering
    the interrupt when asked; starting over when nothing was stored); what each attempt
    did."""
    steps = []
    for _ in range(10):
        try:
            result = runner.resume(THREAD)
        except ThreadNotFoundError:
            steps.append("run")
            result = runner.run(fanout_graph.REF, fanout_graph.INPUT, thread_id=THREAD)
        except AnswerRequiredError:
            steps.append("answer")
            result = runner.resume(THREAD, answer=fanout_graph.ANSWER)
        except NothingToResumeError:
            steps.append("finished")
            return steps
        else:
            steps.append("resume")
        if result.status == "done":
            return steps
    raise AssertionError(f"no end in sight after {steps}")


def final_state(saver: Any) -> dict[str, Any] | None:
    """The state channels of the thread's newest root checkpoint (``None``: no thread)."""
    tup = saver.get_tuple({"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}})
    if tup is None:
        return None
    values = tup.checkpoint["channel_values"]
    return {key: values.get(key) for key in STATE}

"""A run killed anywhere is resumed to the very state an uninterrupted run ends in.

The graph (tests/graphs/fanout_graph.py) has a ``Send`` fan-out, a subgraph in a child
namespace and an ``interrupt()`` inside that subgraph. A crash is injected at the k-th
call to ``put`` or ``put_writes``, for every k of a whole run (the start, then the resume
that answers the interrupt): that call and every later one store nothing (see
tests/graphs/crashes.py). Killing at a ``put`` whose step's writes are all stored is the
case where LangGraph's own ``get_state().next`` is empty though the run is unfinished.

After each crash the thread is recovered the way an operator would, knowing only its id:
``Runner.resume`` (answering the interrupt when it asks; starting over when nothing was
stored), on a freshly opened checkpointer for persistent backends. The final state — every
node execution's effect, in order — must be the uninterrupted run's, and no thread may be
called finished before it is. A few crashes are real: a child process SIGKILLs itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from statekeeper.checkpointers import open_checkpointer
from statekeeper.errors import ThreadBusyError
from statekeeper.graphs import Runner
from statekeeper.threads import thread_summary
from tests.conftest import Backend
from tests.graphs.crashes import THREAD, Crash, Killed, crashing, drive, final_state, recover

ROOT = Path(__file__).resolve().parents[2]
DONE_LOG = ["plan", "work x", "work y", "work z", "finish after prepare + approved yes"]


@pytest.fixture(scope="module")
def baseline() -> tuple[list[str], dict[str, Any]]:
    """The writes an uninterrupted run makes, in order, and the state it ends in."""
    crash = Crash()
    with open_checkpointer("memory://") as saver, crashing(saver, crash):
        drive(Runner(saver))
        state = final_state(saver)
    assert state is not None
    assert state["log"] == DONE_LOG
    assert state["sub_log"] == ["prepare", "approved yes"]
    return crash.calls, state


def check_recovery(saver: Any, expected: dict[str, Any], killed_at: str) -> list[str]:
    """Recover the killed thread and check it ends as ``expected``, and that it was not
    called finished before; what the recovery did."""
    summary = thread_summary(saver, THREAD)
    if summary is not None and summary.finished:
        assert final_state(saver) == expected, f"called finished, killed at {killed_at}"
    steps = recover(Runner(saver))
    assert final_state(saver) == expected, (killed_at, summary, steps)
    summary = thread_summary(saver, THREAD)
    assert summary is not None
    assert (summary.status, summary.next, summary.interrupts) == ("done", (), ())
    return steps


def test_a_run_killed_at_any_write_resumes_to_the_uninterrupted_state(
    backend: Backend, url: str, baseline: tuple[list[str], dict[str, Any]]
) -> None:
    calls, expected = baseline
    recoveries = []
    for at in range(1, len(calls) + 1):
        crash = Crash(at)
        saver = open_checkpointer(url)
        try:
            with crashing(saver, crash), pytest.raises(Killed):
                drive(Runner(saver))
            if backend.persistent:  # what a new process sees
                saver.close()
                saver = open_checkpointer(url)
            recoveries.append(check_recovery(saver, expected, crash.calls[at - 1]))
            saver.delete_thread(THREAD)
        finally:
            saver.close()
    # every kind of recovery happened: starting over, resuming, being asked the answer
    # again, and going on with an answer that was stored before the crash
    assert recoveries[0] == ["run", "answer"]
    assert ["resume", "answer"] in recoveries
    assert ["answer"] in recoveries
    assert recoveries[-1] == ["resume"]


def kill_points(calls: list[str]) -> dict[str, int]:
    """A few places worth a real SIGKILL, as call numbers (1-based) of ``calls``."""
    fan_in = [i for i, call in enumerate(calls, 1) if call == "put_writes log branch:to:review"]
    sub_puts = [i for i, call in enumerate(calls, 1) if call.startswith("put review:")]
    answer = calls.index("put_writes __resume__") + 1
    return {
        "mid fan-out": fan_in[1],
        "after a step's writes, before its checkpoint": fan_in[-1] + 1,
        "inside the subgraph": sub_puts[1],
        "after the answer was stored": answer + 1,
    }


CHILD = """
import json, sys
from statekeeper.checkpointers import open_checkpointer
from statekeeper.graphs import Runner
from tests.graphs.crashes import Crash, crashing, drive
url, at, options = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
saver = open_checkpointer(url, **options)
with crashing(saver, Crash(int(at), sigkill=True)):
    drive(Runner(saver))
"""


@pytest.mark.slow
def test_a_run_killed_by_sigkill_resumes_to_the_uninterrupted_state(
    backend: Backend, url: str, baseline: tuple[list[str], dict[str, Any]]
) -> None:
    if not backend.persistent:
        pytest.skip("memory:// storage dies with its process: nothing to resume")
    calls, expected = baseline
    # a Redis claim outlives a killed holder by its TTL: keep that short
    options = {"claim_ttl": 1.0} if backend.name.startswith("redis") else {}
    for where, at in kill_points(calls).items():
        child = subprocess.run(
            [sys.executable, "-c", CHILD, url, str(at), json.dumps(options)],
            cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
            capture_output=True,
            timeout=120,
        )
        assert child.returncode == -9, (where, child.stderr.decode())
        with open_checkpointer(url) as saver:
            deadline = time.monotonic() + 15
            while True:  # the dead child's Redis claim expires after its TTL
                try:
                    check_recovery(saver, expected, where)
                    break
                except ThreadBusyError:
                    assert time.monotonic() < deadline, f"the claim never expired ({where})"
                    time.sleep(0.2)
            saver.delete_thread(THREAD)

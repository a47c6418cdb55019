"""Typed, versioned graph state and a runner that resumes threads by id.

>>> from statekeeper.checkpointers import open_checkpointer
>>> from statekeeper.graphs import Runner
>>> with open_checkpointer("sqlite:///.statekeeper/state.db") as saver:  # doctest: +SKIP
...     runner = Runner(saver)
...     result = runner.run("myapp.agents:graph", {"question": "..."})
...     if result.interrupts:
...         result = runner.resume(result.thread_id, answer="yes")

:func:`check_input` checks a run's input against the graph's input schema, as
``Runner.run`` does before it claims the thread.

For services that call ``graph.invoke`` themselves, :func:`run_exclusive` (and
:func:`arun_exclusive`) runs one call at a time per thread: a second call is refused
(``multitask="reject"``) or waits its turn (``"enqueue"``).

Its errors (``AnswerRequiredError``, ``GraphLoadError``, ``StateValidationError``...) are
in :mod:`statekeeper.errors`. See ``docs/graphs.md`` for the guarantees: what is recorded
in checkpoint metadata, how migrations are written, and what resume and fork do.
"""

from __future__ import annotations

from statekeeper.graphs._input import check_input
from statekeeper.graphs.exclusive import MULTITASK, arun_exclusive, run_exclusive
from statekeeper.graphs.loading import load_graph
from statekeeper.graphs.results import ForkResult, MigrationResult, RunResult
from statekeeper.graphs.runner import NO_ANSWER, Runner
from statekeeper.graphs.state import Migration, VersionedState

__all__ = [
    "MULTITASK",
    "NO_ANSWER",
    "ForkResult",
    "Migration",
    "MigrationResult",
    "RunResult",
    "Runner",
    "VersionedState",
    "arun_exclusive",
    "check_input",
    "load_graph",
    "run_exclusive",
]

"""A real LangGraph graph, run on every backend, ends exactly where ``InMemorySaver`` ends.

The graph has everything that makes checkpointing hard:

* a subgraph used as a node (``planner``), so checkpoints are written under a child
  ``checkpoint_ns``, with an ``interrupt()`` inside it;
* a ``Send`` fan-out to ``research`` workers whose results are reduced with ``operator.add``;
* a second ``interrupt()`` in the parent graph, answered with ``Command(resume=...)``;
* values that are not plain JSON (a dataclass and an enum), so the serializer is exercised.

Persistent backends are closed and reopened from the same URL (and the graph recompiled)
between every two invocations: that is what a process restart looks like to a checkpointer.
A failing ``Send`` worker checks that pending writes are stored: on resume only the failed
task runs again. One case runs with ``LANGGRAPH_STRICT_MSGPACK=true``, which LangGraph reads
at import time, so it runs in a subprocess.
"""

from __future__ import annotations

import enum
import json
import logging
import operator
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde import _msgpack
from langgraph.checkpoint.serde.event_hooks import register_serde_event_listener
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, StateSnapshot, interrupt

from statekeeper.checkpointers import open_checkpointer

ROOT = Path(__file__).resolve().parents[2]

TOPIC = "tides"
THREAD_ID = "resume-thread"
# The plan the human sends back at the first interrupt: one item more than proposed.
EDITED_PLAN = ["tides history", "tides today", "tides and the moon"]
# The Send worker that fails on its first attempt. It is the last of the fan-out, so with
# max_concurrency=1 the other workers have finished (and their writes are committed) first.
FLAKY_ITEM = EDITED_PLAN[-1]


# -- the graph -------------------------------------------------------------------------


class Verdict(enum.Enum):
    APPROVED = "approved"
    REJECTED = "rejected"


@dataclass(frozen=True)
class Finding:
    item: str
    words: int


class PlanState(TypedDict):
    topic: str
    plan: list[str]


class State(TypedDict, total=False):
    topic: str
    plan: list[str]
    findings: Annotated[list[Finding], operator.add]
    draft: str
    verdict: Verdict


class ResearchTask(TypedDict):
    topic: str
    item: str


class FlakyError(RuntimeError):
    """Raised by a worker on its first attempt."""


# Module-level, so they survive a "restart" (a new checkpointer and a recompiled graph).
CALLS: Counter[str] = Counter()
FAIL_ONCE: set[str] = set()
_LOCK = threading.Lock()


def _called(name: str) -> None:
    with _LOCK:
        CALLS[name] += 1


def outline(state: PlanState) -> dict[str, Any]:
    _called("outline")
    return {"plan": [f"{state['topic']} history", f"{state['topic']} today"]}


def approve_plan(state: PlanState) -> dict[str, Any]:
    _called("approve_plan")
    plan = interrupt({"question": "approve the plan?", "plan": state["plan"]})
    return {"plan": plan}


def fan_out(state: State) -> list[Send]:
    return [Send("research", {"topic": state["topic"], "item": item}) for item in state["plan"]]


def research(task: ResearchTask) -> dict[str, Any]:
    item = task["item"]
    _called(f"research:{item}")
    with _LOCK:
        fail = item in FAIL_ONCE
        FAIL_ONCE.discard(item)
    if fail:
        raise FlakyError(f"research on {item!r} failed (first attempt)")
    return {"findings": [Finding(item=item, words=len(item.split()))]}


def write(state: State) -> dict[str, Any]:
    _called("write")
    lines = [f"- {f.item} ({f.words} words)" for f in state["findings"]]
    return {"draft": "\n".join([f"# {state['topic']}", *lines])}


def review(state: State) -> dict[str, Any]:
    _called("review")
    answer = interrupt({"question": "publish this draft?", "draft": state["draft"]})
    return {"verdict": Verdict(answer)}


def build_graph(checkpointer: BaseCheckpointSaver[Any]) -> Any:
    planner = StateGraph(PlanState)
    planner.add_node("outline", outline)
    planner.add_node("approve_plan", approve_plan)
    planner.add_edge(START, "outline")
    planner.add_edge("outline", "approve_plan")
    planner.add_edge("approve_plan", END)

    builder = StateGraph(State)
    builder.add_node("planner", planner.compile())
    builder.add_node("research", research)
    builder.add_node("write", write)
    builder.add_node("review", review)
    builder.add_edge(START, "planner")
    builder.add_conditional_edges("planner", fan_out, ["research"])
    builder.add_edge("research", "write")
    builder.add_edge("write", "review")
    builder.add_edge("review", END)
    return builder.compile(checkpointer=checkpointer)


# The non-builtin types stored in checkpoints (LangGraph's msgpack allowlist format).
STATE_TYPES = [(t.__module__, t.__name__) for t in (Finding, Verdict)]

EXPECTED_FINAL = {
    "topic": TOPIC,
    "plan": EDITED_PLAN,
    "findings": [Finding(item, len(item.split())) for item in EDITED_PLAN],
    "draft": "# tides\n- tides history (2 words)\n- tides today (2 words)\n"
    "- tides and the moon (4 words)",
    "verdict": Verdict.APPROVED,
}


# -- running it --------------------------------------------------------------------------


class Session:
    """The checkpointer and compiled graph of one "process".

    ``restart()`` simulates a process restart: the checkpointer is closed and a new one is
    opened from the same URL (only for persistent backends: a closed ``memory://`` database
    is gone), and the graph is compiled again.
    """

    def __init__(self, url: str | None, *, persistent: bool) -> None:
        self.url = url
        self.persistent = persistent
        self.saver: BaseCheckpointSaver[Any] = self._open()
        self.graph = build_graph(self.saver)
        self.restarts = 0

    def _open(self) -> BaseCheckpointSaver[Any]:
        return InMemorySaver() if self.url is None else open_checkpointer(self.url)

    def restart(self) -> None:
        if self.url is not None and self.persistent:
            self.saver.close()  # type: ignore[attr-defined]
            self.saver = self._open()
            self.restarts += 1
        self.graph = build_graph(self.saver)

    def reader(self) -> BaseCheckpointSaver[Any]:
        """The checkpointer for reading checkpoints directly, outside the graph.

        In strict msgpack mode ``compile()`` gives the graph a copy of the checkpointer
        whose serializer allows the state schema's own types (``with_allowlist``); a direct
        reader has to do the same. Otherwise it is used as it is, as users would.
        """
        if _msgpack.STRICT_MSGPACK_ENABLED:
            return self.saver.with_allowlist(STATE_TYPES)
        return self.saver

    def close(self) -> None:
        if self.url is not None:
            self.saver.close()  # type: ignore[attr-defined]


@dataclass
class Trace:
    """What a scenario observed, in a form that compares across backends."""

    interrupts: list[Any] = field(default_factory=list)
    subgraph_at_interrupt: dict[str, Any] | None = None
    pending_after_failure: list[tuple[str, str]] | None = None
    final: dict[str, Any] | None = None
    history: list[tuple[Any, ...]] = field(default_factory=list)
    checkpoints_per_ns: dict[str, int] = field(default_factory=dict)
    calls: Counter[str] = field(default_factory=Counter)


def _config() -> dict[str, Any]:
    # max_concurrency=1 runs the fan-out's tasks one after the other in the order of the
    # Sends, which makes "which workers had finished when one failed" deterministic.
    return {"configurable": {"thread_id": THREAD_ID}, "max_concurrency": 1}


def _interrupt_values(output: dict[str, Any]) -> list[Any]:
    return [i.value for i in output["__interrupt__"]]


def _subgraph_values(snapshot: StateSnapshot) -> dict[str, Any]:
    (task,) = snapshot.tasks
    assert task.name == "planner"
    assert isinstance(task.state, StateSnapshot), "the subgraph's state was not found"
    return dict(task.state.values)


def _history_rows(history: list[StateSnapshot]) -> list[tuple[Any, ...]]:
    return [
        (
            s.next,
            s.metadata["step"] if s.metadata else None,
            s.metadata["source"] if s.metadata else None,
            dict(s.values),
            [i.value for i in s.interrupts],
        )
        for s in history
    ]


def _ns_counts(tuples: list[CheckpointTuple]) -> dict[str, int]:
    # A child namespace is "planner:<task id>"; task ids differ between runs, names do not.
    return dict(Counter(t.config["configurable"]["checkpoint_ns"].split(":")[0] for t in tuples))


def _pending(saved: CheckpointTuple | None) -> list[tuple[str, str]]:
    assert saved is not None
    assert saved.pending_writes is not None
    # Task ids depend on checkpoint ids (time-based), so compare channels and values.
    return sorted((channel, repr(value)) for _, channel, value in saved.pending_writes)


def _start_trace(fail: str | None) -> Trace:
    CALLS.clear()
    FAIL_ONCE.clear()
    if fail is not None:
        FAIL_ONCE.add(fail)
    return Trace()


def run_sync(session: Session, *, fail: str | None = None) -> Trace:
    """Start, stop at both interrupts, restart between steps, resume to the end."""
    trace = _start_trace(fail)
    config = _config()
    try:
        out = session.graph.invoke({"topic": TOPIC}, config)
        trace.interrupts += _interrupt_values(out)
        before = _subgraph_values(session.graph.get_state(config, subgraphs=True))
        session.restart()
        trace.subgraph_at_interrupt = _subgraph_values(
            session.graph.get_state(config, subgraphs=True)
        )
        assert trace.subgraph_at_interrupt == before, "subgraph state changed over a restart"

        if fail is None:
            out = session.graph.invoke(Command(resume=EDITED_PLAN), config)
        else:
            with pytest.raises(FlakyError):
                session.graph.invoke(Command(resume=EDITED_PLAN), config)
            session.restart()
            trace.pending_after_failure = _pending(session.reader().get_tuple(config))
            out = session.graph.invoke(None, config)
        trace.interrupts += _interrupt_values(out)
        session.restart()

        out = session.graph.invoke(Command(resume="approved"), config)
        assert "__interrupt__" not in out
        session.restart()

        trace.final = dict(session.graph.get_state(config).values)
        trace.history = _history_rows(list(session.graph.get_state_history(config)))
        reader = session.reader()
        tuples = list(reader.list({"configurable": {"thread_id": THREAD_ID}}))
        trace.checkpoints_per_ns = _ns_counts(tuples)
        for t in tuples:  # every listed checkpoint loads on its own
            loaded = reader.get_tuple(t.config)
            assert loaded is not None
            assert loaded.checkpoint["id"] == t.checkpoint["id"]
    finally:
        session.close()
    trace.calls = Counter(CALLS)
    return trace


async def run_async(session: Session, *, fail: str | None = None) -> Trace:
    """``run_sync`` through the async API (``ainvoke``, ``aget_state``, ``alist``...)."""
    trace = _start_trace(fail)
    config = _config()
    try:
        out = await session.graph.ainvoke({"topic": TOPIC}, config)
        trace.interrupts += _interrupt_values(out)
        before = _subgraph_values(await session.graph.aget_state(config, subgraphs=True))
        session.restart()
        trace.subgraph_at_interrupt = _subgraph_values(
            await session.graph.aget_state(config, subgraphs=True)
        )
        assert trace.subgraph_at_interrupt == before, "subgraph state changed over a restart"

        if fail is None:
            out = await session.graph.ainvoke(Command(resume=EDITED_PLAN), config)
        else:
            with pytest.raises(FlakyError):
                await session.graph.ainvoke(Command(resume=EDITED_PLAN), config)
            session.restart()
            trace.pending_after_failure = _pending(await session.reader().aget_tuple(config))
            out = await session.graph.ainvoke(None, config)
        trace.interrupts += _interrupt_values(out)
        session.restart()

        out = await session.graph.ainvoke(Command(resume="approved"), config)
        assert "__interrupt__" not in out
        session.restart()

        trace.final = dict((await session.graph.aget_state(config)).values)
        trace.history = _history_rows([s async for s in session.graph.aget_state_history(config)])
        reader = session.reader()
        tuples = [t async for t in reader.alist({"configurable": {"thread_id": THREAD_ID}})]
        trace.checkpoints_per_ns = _ns_counts(tuples)
        for t in tuples:
            loaded = await reader.aget_tuple(t.config)
            assert loaded is not None
            assert loaded.checkpoint["id"] == t.checkpoint["id"]
    finally:
        session.close()
    trace.calls = Counter(CALLS)
    return trace


def assert_same_run(got: Trace, expected: Trace) -> None:
    """Field by field, so a failure names what differs."""
    assert got.interrupts == expected.interrupts
    assert got.subgraph_at_interrupt == expected.subgraph_at_interrupt
    assert got.pending_after_failure == expected.pending_after_failure
    assert got.final == expected.final
    assert [row[0] for row in got.history] == [row[0] for row in expected.history]
    assert len(got.history) == len(expected.history)
    assert got.history == expected.history
    assert got.checkpoints_per_ns == expected.checkpoints_per_ns
    assert got.calls == expected.calls


def assert_only_failed_task_reran(failed: Trace, clean: Trace) -> None:
    assert failed.final == clean.final == EXPECTED_FINAL
    # Exactly one extra call: the failed worker. Its siblings' results came from the
    # pending writes saved with the failed super-step, so they did not run again.
    assert failed.calls - clean.calls == Counter({f"research:{FLAKY_ITEM}": 1})
    assert clean.calls - failed.calls == Counter()
    for item in EDITED_PLAN[:-1]:
        assert failed.calls[f"research:{item}"] == 1
    # The siblings' writes and the failure were stored as pending writes.
    assert failed.pending_after_failure is not None
    channels = [channel for channel, _ in failed.pending_after_failure]
    assert channels.count("findings") == len(EDITED_PLAN) - 1
    assert "__error__" in channels


# -- the baseline, computed once per variant ----------------------------------------------

_BASELINES: dict[str | None, Trace] = {}


def baseline(fail: str | None = None) -> Trace:
    if fail not in _BASELINES:
        _BASELINES[fail] = run_sync(Session(None, persistent=False), fail=fail)
    return _BASELINES[fail]


def test_baseline_is_what_the_graph_means() -> None:
    """Guards the reference itself: InMemorySaver's run is the intended one."""
    clean = baseline()
    assert clean.final == EXPECTED_FINAL
    assert clean.interrupts == [
        {"question": "approve the plan?", "plan": ["tides history", "tides today"]},
        {"question": "publish this draft?", "draft": EXPECTED_FINAL["draft"]},
    ]
    assert clean.subgraph_at_interrupt == {
        "topic": TOPIC,
        "plan": ["tides history", "tides today"],
    }
    nexts = [row[0] for row in reversed(clean.history)]
    assert nexts[0] == ("__start__",)
    assert ("research",) * len(EDITED_PLAN) in nexts
    assert nexts[-1] == ()
    assert clean.checkpoints_per_ns.get("planner", 0) > 0, "no subgraph checkpoints"
    assert_only_failed_task_reran(baseline(FLAKY_ITEM), clean)


# -- every backend matches it ---------------------------------------------------------


@pytest.fixture
def blocked_types() -> Iterator[list[str]]:
    """Types the serializer refused to rebuild while the test ran (it should be none)."""
    baseline()  # computed first: InMemorySaver's own serde events are not the backend's
    baseline(FLAKY_ITEM)
    blocked: list[str] = []

    def listen(event: Any) -> None:
        if event["kind"] != "msgpack_unregistered_allowed":
            blocked.append(f"{event['kind']}: {event['module']}.{event['name']}")

    unregister = register_serde_event_listener(listen)
    yield blocked
    unregister()


def test_interrupt_restart_resume_matches_in_memory(
    url: str, backend: Any, blocked_types: list[str]
) -> None:
    session = Session(url, persistent=backend.persistent)
    got = run_sync(session)
    if backend.persistent:
        assert session.restarts == 3
    assert_same_run(got, baseline())
    assert blocked_types == []


def test_failed_worker_resumes_from_pending_writes(
    url: str, backend: Any, blocked_types: list[str]
) -> None:
    got = run_sync(Session(url, persistent=backend.persistent), fail=FLAKY_ITEM)
    assert_only_failed_task_reran(got, baseline())
    assert_same_run(got, baseline(FLAKY_ITEM))
    assert blocked_types == []


async def test_async_interrupt_restart_resume_matches_in_memory(
    url: str, backend: Any, blocked_types: list[str]
) -> None:
    got = await run_async(Session(url, persistent=backend.persistent))
    assert_same_run(got, baseline())
    assert blocked_types == []


async def test_async_failed_worker_resumes_from_pending_writes(
    url: str, backend: Any, blocked_types: list[str]
) -> None:
    got = await run_async(Session(url, persistent=backend.persistent), fail=FLAKY_ITEM)
    assert_only_failed_task_reran(got, baseline())
    assert_same_run(got, baseline(FLAKY_ITEM))
    assert blocked_types == []


# -- strict msgpack ---------------------------------------------------------------------

# Messages LangGraph logs when a checkpoint holds a type outside the msgpack allowlist, or
# when a checkpointer's serializer cannot take the allowlist at all.
_SERDE_COMPLAINTS = (
    "unregistered type",
    "blocked deserialization",
    "not in allowed_msgpack_modules",
    "does not support msgpack allowlist",
    "does not support with_allowlist",
    "strict msgpack",
)


def strict_child(url: str, persistent: bool) -> None:
    """Entry point of the strict-msgpack subprocess: run both scenarios, compare, report."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    assert _msgpack.STRICT_MSGPACK_ENABLED, "LANGGRAPH_STRICT_MSGPACK was not read"
    events: list[dict[str, Any]] = []
    register_serde_event_listener(lambda event: events.append(dict(event)))

    # Control: the listener does see a blocked type (so "no events" below means something).
    # The warning this logs is silenced so stderr only carries the real run's complaints.
    jsonplus_logger = logging.getLogger("langgraph.checkpoint.serde.jsonplus")
    jsonplus_logger.disabled = True
    serde = JsonPlusSerializer()
    serde.loads_typed(serde.dumps_typed(_Unlisted(1)))
    jsonplus_logger.disabled = False
    assert [e["kind"] for e in events] == ["msgpack_blocked"], events
    events.clear()

    expected_clean = run_sync(Session(None, persistent=False))
    expected_failed = run_sync(Session(None, persistent=False), fail=FLAKY_ITEM)
    clean = run_sync(Session(url, persistent=persistent))
    failed = run_sync(
        Session(url + ".failed" if persistent else url, persistent=persistent), fail=FLAKY_ITEM
    )
    assert_same_run(clean, expected_clean)
    assert_same_run(failed, expected_failed)
    assert_only_failed_task_reran(failed, clean)
    assert clean.final == EXPECTED_FINAL
    print(json.dumps({"events": events, "verdict": clean.final["verdict"].value}))


@dataclass(frozen=True)
class _Unlisted:
    n: int


def test_strict_msgpack_round_trips_without_warnings(
    url: str, backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from tests.checkpointers.test_graph_resume import strict_child\n"
        f"strict_child({url!r}, {backend.persistent!r})\n"
    )
    # LangGraph reads the variable when langgraph.checkpoint.serde is first imported, which
    # this process did long ago: the case runs in a fresh interpreter that inherits it.
    monkeypatch.setenv("LANGGRAPH_STRICT_MSGPACK", "true")
    monkeypatch.setenv("PYTHONWARNINGS", "always")
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lowered = proc.stderr.lower()
    for complaint in _SERDE_COMPLAINTS:
        assert complaint not in lowered, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report == {"events": [], "verdict": "approved"}, proc.stderr

"""``statekeeper.transfer``: threads copied between backends, exported and imported, exactly.

The source threads come from a real graph: a subgraph with an ``interrupt()``, a ``Send``
fan-out whose last worker fails once (so the thread holds the finished worker's pending
writes and the failure's ``__error__`` write), values that are not plain JSON (a
dataclass). After a transfer the target must hold the same ``list()`` output (ids, ``ts``,
parents, versions, ``versions_seen``, metadata, values, pending writes), the same
``get_writes`` (task paths included), the same ``get_state_history``, and the graph must
resume there to the same end as on the source, re-running only what had not finished.

Failures (malformed or hostile dumps, existing threads, errors part-way) must leave the
target exactly as it was: every such test snapshots it before and compares after.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime
import hashlib
import io
import json
import operator
import os
import pickle
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import ormsgpack
import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, interrupt

from statekeeper._storage.payload import safe_serde
from statekeeper.checkpointers import open_checkpointer
from statekeeper.errors import (
    ConfigurationError,
    SerializationError,
    ThreadExistsError,
    ThreadNotFoundError,
)
from statekeeper.transfer import (
    TransferStats,
    copy_threads,
    export_threads,
    import_threads,
    list_threads,
)
from tests.checkpointers.test_contract import _run_log as run_log
from tests.checkpointers.test_contract import (
    populate,
    snapshot,
    strict,
    thread,
    version_maker,
)
from tests.conftest import BACKENDS, Backend

# --------------------------------------------------------------------------------------------
# the graph
# --------------------------------------------------------------------------------------------

PLAN = ["tides past", "tides now", "tides and moon"]
CALLS: Counter[str] = Counter()
FAIL_ONCE: set[str] = set()


class FlakyError(RuntimeError):
    """Raised by a worker on its first attempt."""


@dataclasses.dataclass(frozen=True)
class Note:
    item: str
    size: int


class PlanState(TypedDict):
    topic: str
    plan: list[str]


class State(TypedDict, total=False):
    topic: str
    plan: list[str]
    notes: Annotated[list[Note], operator.add]
    summary: str


def outline(state: PlanState) -> dict[str, Any]:
    return {"plan": [f"{state['topic']} past", f"{state['topic']} now"]}


def approve(state: PlanState) -> dict[str, Any]:
    return {"plan": interrupt({"approve": state["plan"]})}


def fan_out(state: State) -> list[Send]:
    return [Send("work", {"item": item}) for item in state["plan"]]


def work(task: dict[str, str]) -> dict[str, Any]:
    item = task["item"]
    CALLS[item] += 1
    if item in FAIL_ONCE:
        FAIL_ONCE.discard(item)
        raise FlakyError(f"{item} failed")
    return {"notes": [Note(item, len(item))]}


def finish(state: State) -> dict[str, Any]:
    CALLS["finish"] += 1
    return {"summary": "; ".join(note.item for note in state["notes"])}


def build_graph(checkpointer: BaseCheckpointSaver[Any]) -> Any:
    planner = StateGraph(PlanState)
    planner.add_node("outline", outline)
    planner.add_node("approve", approve)
    planner.add_edge(START, "outline")
    planner.add_edge("outline", "approve")
    planner.add_edge("approve", END)

    builder = StateGraph(State)
    builder.add_node("planner", planner.compile())
    builder.add_node("work", work)
    builder.add_node("finish", finish)
    builder.add_edge(START, "planner")
    builder.add_conditional_edges("planner", fan_out, ["work"])
    builder.add_edge("work", "finish")
    builder.add_edge("finish", END)
    return builder.compile(checkpointer=checkpointer)


def config(thread_id: str) -> Any:
    # one worker at a time, in Send order: which workers finished before the failure is fixed
    return {"configurable": {"thread_id": thread_id}, "max_concurrency": 1}


def run_to_failure(saver: Any, thread_id: str) -> None:
    """Interrupt in the subgraph, resume, and fail in the last worker: the thread keeps
    the other workers' writes and the failure as pending writes."""
    graph = build_graph(saver)
    graph.invoke({"topic": "tides"}, config(thread_id))
    FAIL_ONCE.add(PLAN[-1])
    with pytest.raises(FlakyError):
        graph.invoke(Command(resume=PLAN), config(thread_id))
    assert not FAIL_ONCE


def run_to_interrupt(saver: Any, thread_id: str) -> None:
    build_graph(saver).invoke({"topic": "tides"}, config(thread_id))


def finish_run(saver: Any, thread_id: str) -> tuple[dict[str, Any], Counter[str]]:
    """Resume ``thread_id`` to its end; return its final values and the calls it made."""
    CALLS.clear()
    graph = build_graph(saver)
    if graph.get_state(config(thread_id)).interrupts:
        out = graph.invoke(Command(resume=PLAN), config(thread_id))
    else:
        out = graph.invoke(None, config(thread_id))
    assert "__interrupt__" not in out
    return dict(graph.get_state(config(thread_id)).values), Counter(CALLS)


EXPECTED_END = {
    "topic": "tides",
    "plan": PLAN,
    "notes": [Note(item, len(item)) for item in PLAN],
    "summary": "; ".join(PLAN),
}


def history(saver: Any, thread_id: str) -> list[Any]:
    """``get_state_history`` in a comparable form (errors by repr, paths as lists)."""
    graph = build_graph(saver)
    return [
        strict(
            {
                "values": snap.values,
                "next": list(snap.next),
                "config": snap.config,
                "metadata": snap.metadata,
                "created_at": snap.created_at,
                "parent": snap.parent_config,
                "tasks": [
                    (t.id, t.name, list(t.path), repr(t.error), [i.value for i in t.interrupts])
                    for t in snap.tasks
                ],
                "interrupts": [(i.id, i.value) for i in snap.interrupts],
            }
        )
        for snap in graph.get_state_history(config(thread_id))
    ]


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Callable[[Backend], Any]]:
    """``open_(backend)``: a fresh, empty saver of that backend (closed and cleaned up
    after the test)."""
    opened: list[tuple[Backend, str, Any]] = []

    def open_(backend: Backend) -> Any:
        url = backend.url_for(tmp_path / f"store-{len(opened)}")
        saver = open_checkpointer(url)
        opened.append((backend, url, saver))
        return saver

    yield open_
    for backend, url, saver in opened:
        saver.close()
        if backend.cleanup is not None:
            backend.cleanup(url)


def by_name(name: str) -> Backend:
    return next(b for b in BACKENDS if b.name == name)


def assert_same_threads(source: Any, target: Any, thread_ids: list[str]) -> None:
    """Same ``list()`` output and, for statekeeper sources, the same ``get_writes``."""
    for thread_id in thread_ids:
        expected = snapshot(source, thread(thread_id))
        assert expected, f"the source has no thread {thread_id!r}"
        assert snapshot(target, thread(thread_id)) == expected, thread_id
        if hasattr(source, "get_writes"):
            for tup in source.list(thread(thread_id)):
                assert strict(target.get_writes(tup.config)) == strict(
                    source.get_writes(tup.config)
                )


def dump_of(source: Any, thread_ids: list[str] | None = None) -> str:
    out = io.StringIO()
    export_threads(source, out, thread_ids)
    return out.getvalue()


class OneWay(io.StringIO):
    """A text stream that cannot seek, like a pipe."""

    def seekable(self) -> bool:
        return False

    def seek(self, *args: Any) -> int:
        raise io.UnsupportedOperation("not seekable")

    def tell(self) -> int:
        raise io.UnsupportedOperation("not seekable")


# --------------------------------------------------------------------------------------------
# copy_threads
# --------------------------------------------------------------------------------------------

PAIRS = [pytest.param(s, t, id=f"{s.name}-to-{t.name}") for s in BACKENDS for t in BACKENDS]


@pytest.mark.parametrize(("source_backend", "target_backend"), PAIRS)
def test_copy_between_backends_is_exact_and_resumes_the_same(
    storage: Callable[[Backend], Any], source_backend: Backend, target_backend: Backend
) -> None:
    source, target = storage(source_backend), storage(target_backend)
    run_to_failure(source, "failed")
    run_to_interrupt(source, "paused 🧵/..")
    ids = list_threads(source)

    stats = copy_threads(source, target)

    assert list_threads(target) == ids == ["paused 🧵/..", "failed"]
    assert stats == TransferStats(
        threads=2,
        checkpoints=len(list(source.list(None))),
        writes=sum(len(source.get_writes(t.config)) for t in source.list(None)),
    )
    assert snapshot(target) == snapshot(source)
    assert_same_threads(source, target, ids)
    for thread_id in ids:
        assert history(target, thread_id) == history(source, thread_id)
        assert build_graph(target).get_state(config(thread_id), subgraphs=True).tasks == (
            build_graph(source).get_state(config(thread_id), subgraphs=True).tasks
        )

    pending = [w.channel for w in target.get_writes(target.get_tuple(config("failed")).config)]
    assert "__error__" in pending
    assert "notes" in pending
    for thread_id in ids:
        on_target = finish_run(target, thread_id)
        on_source = finish_run(source, thread_id)
        assert strict(on_target) == strict(on_source)
        assert on_target[0] == EXPECTED_END


def test_a_copied_failed_thread_reruns_only_the_failed_task(
    storage: Callable[[Backend], Any],
) -> None:
    source, target = storage(by_name("sqlite")), storage(by_name("file"))
    run_to_failure(source, "failed")
    copy_threads(source, target, ["failed"])

    values, calls = finish_run(target, "failed")

    assert values == EXPECTED_END
    assert calls == Counter({PLAN[-1]: 1, "finish": 1})


def test_copy_one_several_or_all_threads(storage: Callable[[Backend], Any]) -> None:
    source = storage(by_name("sqlite"))
    v = version_maker(source)
    for thread_id in ("a", "b", "c", "d"):
        populate(source, thread_id, v)
    run_to_failure(source, "g")
    assert list_threads(source) == ["g", "d", "c", "b", "a"]

    one, several, every = (storage(by_name("memory")) for _ in range(3))
    assert copy_threads(source, one, ["c"]).threads == 1
    assert copy_threads(source, several, ["g", "a", "g"]).threads == 2
    assert copy_threads(source, every).threads == 5

    assert list_threads(one) == ["c"]
    assert list_threads(several) == ["g", "a"]
    assert list_threads(every) == list_threads(source)
    assert_same_threads(source, one, ["c"])
    assert_same_threads(source, several, ["g", "a"])
    assert snapshot(every) == snapshot(source)
    assert copy_threads(source, storage(by_name("memory")), []) == TransferStats(0, 0, 0)


def test_copy_reports_progress_after_each_checkpoint(storage: Callable[[Backend], Any]) -> None:
    source = storage(by_name("memory"))
    v = version_maker(source)
    populate(source, "a", v)
    populate(source, "b", v)
    calls: list[tuple[int, int, int]] = []

    stats = copy_threads(
        source, storage(by_name("memory")), progress=lambda *args: calls.append(args)
    )

    assert stats == TransferStats(threads=2, checkpoints=10, writes=20)
    assert calls == [(i // 5, 2, i) for i in range(1, 11)]


def test_copy_refuses_threads_the_target_has_and_writes_nothing(
    storage: Callable[[Backend], Any],
) -> None:
    source, target = storage(by_name("sqlite")), storage(by_name("sqlite"))
    v = version_maker(source)
    for thread_id in ("a", "b", "c"):
        populate(source, thread_id, v)
    populate(target, "b", version_maker(target))
    populate(target, "c", version_maker(target))
    before = snapshot(target)

    with pytest.raises(ThreadExistsError, match="'c', 'b'") as refused:
        copy_threads(source, target)
    assert "'a'" not in str(refused.value)
    assert snapshot(target) == before


def test_copy_of_a_missing_thread_raises_and_writes_nothing(
    storage: Callable[[Backend], Any],
) -> None:
    source, target = storage(by_name("memory")), storage(by_name("memory"))
    populate(source, "a", version_maker(source))

    with pytest.raises(ThreadNotFoundError, match="'nope'"):
        copy_threads(source, target, ["a", "nope"])
    with pytest.raises(ConfigurationError, match="list of thread ids"):
        copy_threads(source, target, "a")
    assert snapshot(target) == []


@pytest.mark.parametrize("target_backend", BACKENDS, ids=str)
def test_a_copy_failing_part_way_leaves_the_target_unchanged(
    storage: Callable[[Backend], Any], target_backend: Backend
) -> None:
    source, target = InMemorySaver(), storage(target_backend)
    v = version_maker(target)
    populate(source, "a", v)
    configs = populate(source, "b", v)
    bad = source.get_tuple(configs["r2"])
    assert bad is not None
    source.put(  # metadata that is not JSON: statekeeper's backends refuse to store it
        bad.config,
        {**bad.checkpoint, "id": "z-newest"},
        {**bad.metadata, "when": datetime.datetime.now(datetime.UTC)},
        {},
    )
    populate(target, "kept", version_maker(target))
    before = snapshot(target)

    with pytest.raises(SerializationError, match="metadata must be JSON"):
        copy_threads(source, target, ["a", "b"])
    assert snapshot(target) == before

    def interrupt_after_three(threads: int, total: int, checkpoints: int) -> None:
        if checkpoints == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        copy_threads(source, target, ["a"], progress=interrupt_after_three)
    assert snapshot(target) == before


def test_copy_refuses_a_value_the_source_would_not_rebuild(
    storage: Callable[[Backend], Any], tmp_path: Path
) -> None:
    canary = tmp_path / "pwned"
    source, target = InMemorySaver(serde=safe_serde()), storage(by_name("sqlite"))
    populate(source, "t", version_maker(target))
    hostile = ormsgpack.packb(
        ormsgpack.Ext(0, ormsgpack.packb(["os", "system", f"touch {canary}"]))
    )
    key = next(k for k in source.blobs if k[2] == "a")
    source.blobs[key] = ("msgpack", hostile)

    with pytest.raises(SerializationError, match=r"os\.system"):
        copy_threads(source, target)
    assert not canary.exists()
    assert snapshot(target) == []


@pytest.mark.parametrize("pruned", [False, True], ids=["whole", "pruned"])
def test_delta_channel_threads_copy_and_round_trip(
    storage: Callable[[Backend], Any], pruned: bool
) -> None:
    source = storage(by_name("sqlite"))
    graph, log_config = run_log(source, 11)
    if pruned:  # the oldest kept checkpoints name parents that are gone
        source.prune(["log"], strategy="keep_latest")
        oldest = list(source.list(log_config))[-1]
        assert oldest.parent_config is not None
        assert source.get_tuple(oldest.parent_config) is None
    copied, imported = storage(by_name("file")), storage(by_name("redis"))

    copy_threads(source, copied)
    import_threads(imported, io.StringIO(dump_of(source)))

    for target in (copied, imported):
        assert snapshot(target) == snapshot(source)
        assert_same_threads(source, target, ["log"])
        assert [s.values for s in graph.get_state_history(log_config)] == [
            s.values for s in run_log(target, 0)[0].get_state_history(log_config)
        ]
        log = graph.get_state(log_config).values["log"]
        resumed = run_log(target, 0)[0]
        resumed.invoke({"log": ["more"]}, log_config)
        assert resumed.get_state(log_config).values["log"] == [*log, "more", f"step {len(log) + 1}"]


# --------------------------------------------------------------------------------------------
# from LangGraph's own savers
# --------------------------------------------------------------------------------------------


def pending_sorted(saver: Any) -> list[Any]:
    return sorted(strict([tuple(w) for w in t.pending_writes or []]) for t in saver.list(None))


@pytest.mark.parametrize("kind", ["InMemorySaver", "SqliteSaver"])
@pytest.mark.parametrize("target_backend", BACKENDS, ids=str)
def test_copy_from_langgraph_savers_is_exact_and_resumes(
    storage: Callable[[Backend], Any], target_backend: Backend, kind: str, tmp_path: Path
) -> None:
    with langgraph_saver(kind, tmp_path) as source:
        run_to_failure(source, "failed")
        run_to_interrupt(source, "paused")
        target = storage(target_backend)

        stats = copy_threads(source, target)

        assert stats.threads == 2
        assert stats.checkpoints == len(list(source.list(None)))
        assert sorted(list_threads(target)) == ["failed", "paused"]
        by_id = {t.checkpoint["id"]: t for t in source.list(None)}
        for tup in target.list(None):
            original = by_id[tup.checkpoint["id"]]
            # LangGraph's savers do not report task paths: writes may come back in another
            # order (by task id); everything else is identical
            assert strict(sorted(tup.pending_writes, key=repr)) == strict(
                sorted(original.pending_writes, key=repr)
            )
            assert {w.task_path for w in target.get_writes(tup.config)} <= {""}
            assert strict(tup._replace(pending_writes=None)) == strict(
                original._replace(pending_writes=None)
            )
        for thread_id in ("failed", "paused"):
            assert history(target, thread_id) == history(source, thread_id)
            assert strict(finish_run(target, thread_id)) == strict(finish_run(source, thread_id))


def langgraph_saver(kind: str, tmp_path: Path) -> Any:
    if kind == "InMemorySaver":
        return contextlib.nullcontext(InMemorySaver())
    return SqliteSaver.from_conn_string(str(tmp_path / "langgraph.db"))


# --------------------------------------------------------------------------------------------
# export / import
# --------------------------------------------------------------------------------------------

ODD_THREADS = ["../../etc/passwd", "a\x00b", "键 🔑", "x" * 10_000]


@pytest.fixture
def dump_source(storage: Callable[[Backend], Any]) -> Any:
    """A SQLite saver with graph threads, hand-made threads and odd thread ids."""
    source = storage(by_name("sqlite"))
    run_to_failure(source, "failed")
    run_to_interrupt(source, "paused")
    v = version_maker(source)
    for thread_id in ODD_THREADS:
        populate(source, thread_id, v)
    return source


def test_export_then_import_round_trips_exactly(saver: Any, dump_source: Any) -> None:
    text = dump_of(dump_source)

    stats = import_threads(saver, io.StringIO(text))

    ids = list_threads(dump_source)
    assert stats.threads == len(ids) == 6
    assert stats.checkpoints == len(list(dump_source.list(None)))
    assert list_threads(saver) == ids
    assert snapshot(saver) == snapshot(dump_source)
    assert_same_threads(dump_source, saver, ids)
    for thread_id in ("failed", "paused"):
        assert history(saver, thread_id) == history(dump_source, thread_id)
    assert finish_run(saver, "failed")[0] == EXPECTED_END


def test_import_from_a_stream_that_cannot_seek(
    storage: Callable[[Backend], Any], dump_source: Any
) -> None:
    target = storage(by_name("file"))
    text = dump_of(dump_source, ["failed", "../../etc/passwd"])
    calls: list[tuple[int, int, int]] = []

    stats = import_threads(target, OneWay(text), progress=lambda *a: calls.append(a))

    assert_same_threads(dump_source, target, ["failed", "../../etc/passwd"])
    assert calls[-1] == (2, 2, stats.checkpoints)
    assert [c[2] for c in calls] == list(range(1, stats.checkpoints + 1))


def test_export_writes_the_documented_format(dump_source: Any, tmp_path: Path) -> None:
    path = tmp_path / "dump.jsonl"
    with path.open("w", encoding="utf-8") as out:
        stats = export_threads(dump_source, out, ["failed", "a\x00b"])
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    assert all(line.isascii() for line in lines)
    header, *records, trailer = (json.loads(line) for line in lines)

    assert header.keys() == {"format", "version", "created_at"}
    assert (header["format"], header["version"]) == ("statekeeper-dump", 1)
    assert len(records) == stats.checkpoints
    assert [r["thread_id"] for r in records] == sorted(
        [r["thread_id"] for r in records], key=["failed", "a\x00b"].index
    )
    for record in records:
        assert record["kind"] == "checkpoint"
        assert set(record["values"]) <= set(record["new_versions"])
        for payload in [*record["values"].values(), *(w["value"] for w in record["writes"])]:
            assert payload["type"] in ("null", "bytes", "bytearray", "msgpack")
            base64.b64decode(payload["data"], validate=True)
    assert any(w["channel"] == "__error__" for r in records for w in r["writes"])
    assert any(r["checkpoint_ns"] for r in records)  # the subgraph's checkpoints
    digest = hashlib.sha256("".join(lines[:-1]).encode()).hexdigest()
    assert trailer == {
        "kind": "end",
        "threads": 2,
        "checkpoints": stats.checkpoints,
        "writes": stats.writes,
        "sha256": digest,
    }
    with path.open(encoding="utf-8") as src, open_checkpointer("memory://") as target:
        assert import_threads(target, src) == stats


def test_importing_into_threads_that_exist_raises_and_changes_nothing(
    saver: Any, dump_source: Any
) -> None:
    text = dump_of(dump_source, ["failed", "paused"])
    populate(saver, "paused", version_maker(saver))
    before = snapshot(saver)

    with pytest.raises(ThreadExistsError, match="'paused'"):
        import_threads(saver, io.StringIO(text))
    assert snapshot(saver) == before


def test_export_of_a_missing_thread_raises_before_writing(dump_source: Any) -> None:
    out = io.StringIO()
    with pytest.raises(ThreadNotFoundError):
        export_threads(dump_source, out, ["failed", "nope"])
    assert out.getvalue() == ""


# -- malformed and hostile dumps ------------------------------------------------------------


def lines_of(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def forge(objs: list[dict[str, Any]]) -> str:
    """A dump of ``objs`` (header, records, trailer) with the trailer's counts and
    checksum made to match, so only the defect a test plants is wrong."""
    lines = [json.dumps(obj) + "\n" for obj in objs[:-1]]
    records = [o for o in objs[1:-1] if o.get("kind") == "checkpoint"]
    trailer = {
        **objs[-1],
        "threads": len({r["thread_id"] for r in records}),
        "checkpoints": len(records),
        "writes": sum(len(r["writes"]) for r in records),
        "sha256": hashlib.sha256("".join(lines).encode()).hexdigest(),
    }
    return "".join(lines) + json.dumps(trailer) + "\n"


def payload(data: bytes, type_: str = "msgpack") -> dict[str, str]:
    return {"type": type_, "data": base64.b64encode(data).decode()}


class _Reduce:
    def __init__(self, canary: Path) -> None:
        self.canary = canary

    def __reduce__(self) -> Any:
        return (os.system, (f"touch {self.canary}",))


def _set(path: tuple[Any, ...], value: Any) -> Callable[[list[dict[str, Any]]], None]:
    def edit(objs: list[dict[str, Any]]) -> None:
        *parents, last = path
        obj: Any = objs
        for key in parents:
            obj = obj[key]
        obj[last] = value

    return edit


def _hostile_msgpack(canary: Path) -> bytes:
    return ormsgpack.packb(ormsgpack.Ext(0, ormsgpack.packb(["os", "system", f"touch {canary}"])))


def _popen(canary: Path) -> bytes:
    call = ["subprocess", "Popen", [["touch", str(canary)]]]
    return ormsgpack.packb(ormsgpack.Ext(1, ormsgpack.packb(call)))


def _unknown_extension() -> bytes:
    """A value with an msgpack extension code nothing writes: LangGraph reads it as None."""
    return ormsgpack.packb(["kept", ormsgpack.Ext(42, b"lost")])


def _unknown_inside_an_object() -> bytes:
    """A pydantic model (as LangGraph encodes one) whose field holds an unknown extension."""
    fields = {"content": ormsgpack.Ext(99, b""), "type": "human"}
    model = ["langchain_core.messages.human", "HumanMessage", fields, "model_validate_json"]
    return ormsgpack.packb(ormsgpack.Ext(5, ormsgpack.packb(model)))


def _child_of(objs: list[dict[str, Any]], index: int) -> dict[str, Any]:
    """The first record whose parent is ``objs[index]``."""
    parent = objs[index]
    return next(
        o
        for o in objs
        if o.get("parent_id") == parent["checkpoint_id"]
        and o["checkpoint_ns"] == parent["checkpoint_ns"]
    )


def _nested_dicts(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"k": value}
    return value


def _lc_json(canary: Path) -> bytes:
    obj = {"lc": 2, "type": "constructor", "id": ["os", "system"], "kwargs": {"x": str(canary)}}
    return json.dumps(obj).encode()


# (id, edit of the parsed lines -> forged with a valid trailer, expected message)
FORGED: list[tuple[str, Callable[[Any, Path], Any], str]] = [
    ("lone-surrogate-thread-id", lambda o, c: _set((1, "thread_id"), "\ud800")(o), "line 2: "),
    (
        "huge-thread-id",
        lambda o, c: _set((1, "thread_id"), "x" * 70_000)(o),
        "line 2: thread_id is 70000 characters long",
    ),
    ("number-thread-id", lambda o, c: _set((1, "thread_id"), 7)(o), "line 2: thread_id must"),
    ("empty-checkpoint-id", lambda o, c: _set((1, "checkpoint_id"), "")(o), "line 2: "),
    (
        "os-system-in-a-value",
        lambda o, c: _set((1, "values", "a"), payload(_hostile_msgpack(c)))(o),
        r"line 2: the value of channel 'a' names os\.system",
    ),
    (
        "popen-in-a-write",
        lambda o, c: _set((1, "writes", 0, "value"), payload(_popen(c)))(o),
        r"line 2: the value of writes\[0\] names subprocess\.Popen",
    ),
    (
        "pickle-payload",
        lambda o, c: _set((1, "values", "a"), payload(pickle.dumps(_Reduce(c)), "pickle"))(o),
        "payload type 'pickle'",
    ),
    (
        "lc-json-payload",
        lambda o, c: _set((1, "values", "a"), payload(_lc_json(c), "json"))(o),
        "payload type 'json'",
    ),
    (
        "bad-base64",
        lambda o, c: _set((1, "values", "a"), {"type": "msgpack", "data": "%%%"})(o),
        "not valid base64",
    ),
    (
        "unknown-msgpack-extension-in-a-value",
        lambda o, c: _set((1, "values", "a"), payload(_unknown_extension()))(o),
        r"line 2: .*msgpack extension code 42.* refused rather than read with None",
    ),
    (
        "unknown-msgpack-extension-inside-an-object",
        lambda o, c: _set((1, "writes", 0, "value"), payload(_unknown_inside_an_object()))(o),
        r"line 2: .*msgpack extension code 99",
    ),
    (
        "900-deep-list-value",
        lambda o, c: _set((1, "values", "a"), payload(b"\x91" * 900 + b"\x90"))(o),
        "line 2: .*nested deeper than 255 levels",
    ),
    (
        "900-deep-dict-in-a-write",
        lambda o, c: _set((1, "writes", 0, "value"), payload(b"\x81\xa1k" * 900 + b"\x90"))(o),
        "line 2: .*nested deeper than 255 levels",
    ),
    (
        "deep-metadata",
        lambda o, c: _set((1, "metadata", "deep"), _nested_dicts(600))(o),
        "line 2: metadata.* is nested too deeply",
    ),
    ("duplicate-checkpoint", lambda o, c: o.insert(2, dict(o[1])), "line 3: .* appears twice"),
    ("unknown-field", lambda o, c: _set((1, "extra"), 1)(o), "unknown fields 'extra'"),
    ("missing-field", lambda o, c: o[1].pop("metadata"), "lacks 'metadata'"),
    ("unknown-kind", lambda o, c: _set((1, "kind"), "thread")(o), "unknown record kind"),
    ("parent-after-child", lambda o, c: o.insert(1, o.pop(2)), "line 2: parent checkpoint"),
    (
        "its-own-parent",
        lambda o, c: _set((1, "parent_id"), o[1]["checkpoint_id"])(o),
        "line 2: checkpoint '[^']+' of thread 't' is its own parent",
    ),
    (
        "parent-cycle",
        lambda o, c: _set((1, "parent_id"), _child_of(o, 1)["checkpoint_id"])(o),
        r"line \d+: checkpoint '[^']+' of thread 't' is its own ancestor",
    ),
    (
        "self-contained-child-before-its-parent",
        lambda o, c: (
            o.insert(1, o.pop(2)),
            _set((1, "new_versions"), o[1]["checkpoint"]["channel_versions"])(o),
        ),
        "line 3: .* comes after its child on line 2",
    ),
    (
        "value-of-a-channel-not-new",
        lambda o, c: _set((2, "values", "zzz"), payload(b"\xa1x"))(o),
        "not in new_versions",
    ),
    (
        "new-versions-not-the-difference",
        lambda o, c: _set((2, "new_versions"), {})(o),
        "new_versions must list exactly",
    ),
    ("versions-not-an-object", lambda o, c: _set((1, "checkpoint", "channel_versions"), [])(o), ""),
    ("checkpoint-with-values", lambda o, c: _set((1, "checkpoint", "channel_values"), {})(o), ""),
    ("split-thread", lambda o, c: o.insert(-2, {**o[1], "thread_id": "u"}), "not all together"),
    (
        "version-2",
        lambda o, c: _set((0, "version"), 2)(o),
        "line 1: dump format version 2 is newer",
    ),
    ("version-text", lambda o, c: _set((0, "version"), "1")(o), "unknown dump format version"),
    ("not-a-dump", lambda o, c: _set((0, "format"), "other")(o), "line 1: not a statekeeper dump"),
]


@pytest.fixture
def small_dump(storage: Callable[[Backend], Any]) -> str:
    """A dump of one populated thread ``t`` (root chain r0 -> r1 -> r2, child chain)."""
    source = storage(by_name("memory"))
    populate(source, "t", version_maker(source))
    return dump_of(source)


@pytest.fixture
def guarded_target(storage: Callable[[Backend], Any]) -> Iterator[Any]:
    """A file-backend target holding one thread; the test must leave it unchanged."""
    target = storage(by_name("file"))
    populate(target, "kept", version_maker(target))
    before = snapshot(target)
    yield target
    assert snapshot(target) == before


@pytest.mark.parametrize(("case", "edit", "message"), FORGED, ids=[f[0] for f in FORGED])
def test_forged_dumps_are_refused_naming_the_line(
    guarded_target: Any,
    small_dump: str,
    tmp_path: Path,
    case: str,
    edit: Callable[[Any, Path], Any],
    message: str,
) -> None:
    canary = tmp_path / "pwned"
    objs = lines_of(small_dump)
    edit(objs, canary)

    with pytest.raises(SerializationError, match=message or "dump line"):
        import_threads(guarded_target, io.StringIO(forge(objs)))
    assert not canary.exists()


def _drop_trailer(text: str) -> str:
    return "".join(text.splitlines(keepends=True)[:-1])


def _cut_in_half(text: str) -> str:
    return text[: len(text) // 2]


def _drop_a_record(text: str) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(lines[:2] + lines[3:])


def _drop_the_last_record(text: str) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(lines[:-2] + lines[-1:])


def _alter_a_record(text: str) -> str:
    lines = text.splitlines(keepends=True)
    lines[2] = lines[2].replace('"step":', '"step":1', 1)
    return "".join(lines)


RAW: list[tuple[str, Callable[[str], str], type[Exception], str]] = [
    ("empty", lambda t: "", SerializationError, "the dump is empty"),
    ("no-trailer", _drop_trailer, SerializationError, "without its trailer: it is truncated"),
    ("cut-in-half", _cut_in_half, SerializationError, "dump line|truncated"),
    ("missing-record", _drop_a_record, SerializationError, "parents must come first|counts"),
    ("missing-leaf", _drop_the_last_record, SerializationError, "trailer counts 5 checkpoints"),
    ("altered-record", _alter_a_record, SerializationError, "checksum does not match"),
    ("after-trailer", lambda t: t + t.splitlines()[1] + "\n", SerializationError, "after the"),
    ("not-json", lambda t: t.replace("}", "", 1), SerializationError, "line 1: not valid JSON"),
    ("blank-line", lambda t: t.replace("\n", "\n\n", 1), SerializationError, "line 2: not valid"),
    ("nan", lambda t: t.replace('"step":', '"step":NaN,"x":', 1), SerializationError, "NaN"),
    ("dup-key", lambda t: t.replace('"v":', '"v":1,"v":', 1), SerializationError, "same key"),
    ("array-line", lambda t: "[]\n" + t, SerializationError, "line 1: not a JSON object"),
]


@pytest.mark.parametrize(("case", "damage", "error", "message"), RAW, ids=[r[0] for r in RAW])
def test_damaged_dumps_are_refused(
    guarded_target: Any,
    small_dump: str,
    case: str,
    damage: Callable[[str], str],
    error: type[Exception],
    message: str,
) -> None:
    with pytest.raises(error, match=message):
        import_threads(guarded_target, io.StringIO(damage(small_dump)))
    with pytest.raises(error, match=message):
        import_threads(guarded_target, OneWay(damage(small_dump)))


def test_a_dump_opened_in_binary_mode_is_refused(guarded_target: Any, small_dump: str) -> None:
    with pytest.raises(ConfigurationError, match="text mode"):
        import_threads(guarded_target, io.BytesIO(small_dump.encode()))  # type: ignore[arg-type]


def test_a_dump_with_windows_newlines_imports(guarded_target: Any, small_dump: str) -> None:
    text = small_dump.replace("\n", "\r\n")
    stream = io.TextIOWrapper(io.BytesIO(text.encode()), encoding="utf-8", newline="")
    assert import_threads(guarded_target, stream).threads == 1
    guarded_target.delete_thread("t")


def test_ids_that_look_like_paths_are_stored_as_ids(
    guarded_target: Any, small_dump: str, tmp_path: Path
) -> None:
    objs = lines_of(small_dump)
    for obj in objs[1:-1]:
        obj["thread_id"] = "../../../../outside\x00"
    around = [tmp_path.parent, tmp_path.parent.parent]
    before = [sorted(p.iterdir()) for p in around]

    assert import_threads(guarded_target, io.StringIO(forge(objs))).threads == 1

    assert list_threads(guarded_target)[0] == "../../../../outside\x00"
    assert [sorted(p.iterdir()) for p in around] == before
    guarded_target.delete_thread("../../../../outside\x00")


def test_an_import_interrupted_part_way_leaves_the_target_unchanged(
    guarded_target: Any, dump_source: Any
) -> None:
    def stop_after_four(threads: int, total: int, checkpoints: int) -> None:
        if checkpoints == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        import_threads(guarded_target, io.StringIO(dump_of(dump_source)), progress=stop_after_four)

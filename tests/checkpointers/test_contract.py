"""Checkpointer contract beyond LangGraph's conformance suite, run against every backend.

Every test takes the ``saver`` (or ``backend``/``url``) fixture from ``tests/conftest.py``, so
each entry of ``BACKENDS`` runs the whole module. Mostly the sync API is exercised (the
conformance suite drives the async one); async twins cover places where the two could differ.

Conventions: checkpoint ids come from ``uuid6`` so creation order is id order; ``strict()``
compares values with their types (``True != 1``, ``bytes != bytearray``), because ``==`` alone
would hide a value that came back altered.
"""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta, timezone
from typing import Annotated, Any, NamedTuple, TypedDict

import pydantic
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    writes_sort_key,
)
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT, RESUME, SCHEDULED
from langgraph.graph import START, StateGraph

from statekeeper.checkpointers import open_checkpointer
from statekeeper.errors import (
    ConfigurationError,
    InvalidIdError,
    SerializationError,
    StatekeeperError,
    StorageError,
    ThreadExistsError,
)

# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------

_VERSION_COUNTER = itertools.count(1)  # default channel versions: unique within the process


def new_id() -> str:
    """A fresh checkpoint id, greater than every id made before it in this process."""
    return str(uuid6(clock_seq=-1))


def cfg(thread_id: str, ns: str = "", checkpoint_id: str | None = None) -> RunnableConfig:
    configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def thread(thread_id: str) -> RunnableConfig:
    """A list() config for every namespace of one thread."""
    return {"configurable": {"thread_id": thread_id}}


def _put_args(
    thread_id: str,
    *,
    ns: str = "",
    parent: RunnableConfig | None = None,
    values: dict[str, Any] | None = None,
    versions: ChannelVersions | None = None,
    new_versions: ChannelVersions | None = None,
    metadata: CheckpointMetadata | None = None,
    checkpoint_id: str | None = None,
) -> tuple[RunnableConfig, Checkpoint, CheckpointMetadata, ChannelVersions]:
    values = dict(values or {})
    if versions is None:
        number = next(_VERSION_COUNTER)
        versions = dict.fromkeys(values, number)
    if new_versions is None:
        new_versions = dict(versions)
    checkpoint = generate_checkpoint(
        checkpoint_id=checkpoint_id or new_id(),
        channel_values=values,
        channel_versions=dict(versions),
    )
    parent_id = parent["configurable"]["checkpoint_id"] if parent else None
    if metadata is None:
        metadata = generate_metadata()
    return cfg(thread_id, ns, parent_id), checkpoint, metadata, dict(new_versions)


def put(saver: Any, thread_id: str, **kwargs: Any) -> RunnableConfig:
    """Store one checkpoint (child of ``parent`` if given); return the stored config."""
    return saver.put(*_put_args(thread_id, **kwargs))  # type: ignore[no-any-return]


async def aput(saver: Any, thread_id: str, **kwargs: Any) -> RunnableConfig:
    return await saver.aput(*_put_args(thread_id, **kwargs))  # type: ignore[no-any-return]


def cp_id(config: RunnableConfig) -> str:
    return config["configurable"]["checkpoint_id"]  # type: ignore[no-any-return]


def where_cfg(config: RunnableConfig) -> tuple[str, str, str]:
    c = config["configurable"]
    return (c["thread_id"], c.get("checkpoint_ns", ""), c["checkpoint_id"])


def where(tup: CheckpointTuple) -> tuple[str, str, str]:
    return where_cfg(tup.config)


def writes_of(tup: CheckpointTuple | None) -> list[tuple[Any, ...]]:
    assert tup is not None
    return [tuple(w) for w in tup.pending_writes or []]


def values_at(saver: Any, config: RunnableConfig) -> dict[str, Any]:
    tup = saver.get_tuple(config)
    assert tup is not None, f"checkpoint {where_cfg(config)} is missing"
    return tup.checkpoint["channel_values"]  # type: ignore[no-any-return]


def strict(value: Any) -> Any:
    """A comparable form of ``value`` that differs whenever a type differs, at any depth."""
    if isinstance(value, dict):
        items = [(strict(k), strict(v)) for k, v in value.items()]
        return ("dict", sorted(items, key=repr))
    if isinstance(value, list | tuple):
        return (type(value).__name__, [strict(v) for v in value])
    if isinstance(value, datetime):
        return ("datetime", value.isoformat())  # keeps the UTC offset, unlike ==
    return (f"{type(value).__module__}.{type(value).__qualname__}", value)


def view(tup: CheckpointTuple, *, with_thread: bool = True, with_parent: bool = True) -> Any:
    """Everything a checkpoint tuple carries, in ``strict`` form."""
    here = list(where(tup)) if with_thread else list(where(tup))[1:]
    parent: list[str] | None = None
    if with_parent and tup.parent_config is not None:
        parent = list(where_cfg(tup.parent_config))
        if not with_thread:
            parent = parent[1:]
    return strict(
        {
            "where": here,
            "checkpoint": dict(tup.checkpoint),
            "metadata": dict(tup.metadata),
            "parent": parent if with_parent else "not compared",
            "writes": writes_of(tup),
        }
    )


def snapshot(saver: Any, config: RunnableConfig | None = None) -> list[Any]:
    return [view(t) for t in saver.list(config)]


def thread_ids(saver: Any) -> list[str]:
    """The distinct thread ids that have at least one checkpoint."""
    return sorted({where(t)[0] for t in saver.list(None)})


def version_maker(saver: Any) -> Callable[[int], Any]:
    """``v(n)``: the saver's own version string for the n-th version of a channel (cached)."""
    cache: dict[int, Any] = {}

    def v(n: int) -> Any:
        if n not in cache:
            cache[n] = saver.get_next_version(n - 1, None)
        return cache[n]

    return v


def populate(saver: Any, thread_id: str, v: Callable[[int], Any], run_id: str = "run-1") -> dict:
    """A realistic thread: a root chain r0 -> r1 -> r2 and a child chain k0 -> k1.

    r2 stores no blob of its own (it inherits ``a`` from r1 and ``b`` from r0); every
    checkpoint has pending writes from several tasks, put in scrambled order.
    """

    def md(step: int) -> CheckpointMetadata:
        return {**generate_metadata(step=step), "run_id": run_id, "note": f"{thread_id}@{step}"}

    r0 = put(
        saver,
        thread_id,
        values={"a": "a0", "b": ["b0"]},
        versions={"a": v(1), "b": v(1)},
        metadata=md(-1),
    )
    saver.put_writes(r0, [("a", "r0-z")], "task-z", "~p, z")
    saver.put_writes(r0, [("a", "r0-a0"), ("b", "r0-a1")], "task-a", "~p, a")
    r1 = put(
        saver,
        thread_id,
        parent=r0,
        values={"a": "a1"},
        versions={"a": v(2), "b": v(1)},
        new_versions={"a": v(2)},
        metadata=md(0),
    )
    saver.put_writes(r1, [("b", "r1-e"), (ERROR, "boom")], "task-e", "~p, e")
    k0 = put(
        saver,
        thread_id,
        ns="child:1",
        values={"c": {"deep": [True, 1]}},
        versions={"c": v(1)},
        metadata=md(0),
    )
    saver.put_writes(k0, [("c", "k0-w")], "task-k", "~p, k")
    r2 = put(
        saver,
        thread_id,
        parent=r1,
        versions={"a": v(2), "b": v(1)},
        new_versions={},
        metadata=md(1),
    )
    saver.put_writes(r2, [("a", "r2-y")], "task-y", "~p, y")
    saver.put_writes(r2, [("a", "r2-b0"), ("b", "r2-b1")], "task-b", "~p, b")
    k1 = put(
        saver,
        thread_id,
        ns="child:1",
        parent=k0,
        values={"c": "c1"},
        versions={"c": v(2)},
        metadata=md(1),
    )
    saver.put_writes(k1, [("c", "k1-w")], "task-k", "~p, k")
    return {"r0": r0, "r1": r1, "r2": r2, "k0": k0, "k1": k1}


POPULATED_VALUES = {
    "r0": {"a": "a0", "b": ["b0"]},
    "r1": {"a": "a1", "b": ["b0"]},
    "r2": {"a": "a1", "b": ["b0"]},
    "k0": {"c": {"deep": [True, 1]}},
    "k1": {"c": "c1"},
}
POPULATED_WRITES = {
    "r0": [("task-a", "a", "r0-a0"), ("task-a", "b", "r0-a1"), ("task-z", "a", "r0-z")],
    "r1": [("task-e", ERROR, "boom"), ("task-e", "b", "r1-e")],
    "r2": [("task-b", "a", "r2-b0"), ("task-b", "b", "r2-b1"), ("task-y", "a", "r2-y")],
    "k0": [("task-k", "c", "k0-w")],
    "k1": [("task-k", "c", "k1-w")],
}


def assert_populated_intact(saver: Any, configs: dict) -> None:
    for name, config in configs.items():
        tup = saver.get_tuple(config)
        assert tup is not None, f"{name} is missing"
        assert strict(tup.checkpoint["channel_values"]) == strict(POPULATED_VALUES[name]), name
        assert strict(writes_of(tup)) == strict(POPULATED_WRITES[name]), name


# --------------------------------------------------------------------------------------------
# 1. list(None): global, newest first
# --------------------------------------------------------------------------------------------


def _interleave(saver: Any) -> list[tuple[str, str, str]]:
    stored: list[tuple[str, str, str]] = []
    heads: dict[tuple[str, str], RunnableConfig] = {}
    for i in range(15):
        key = (("t-a", "t-b", "t-c")[i % 3], ("", "child:1")[i % 2])
        heads[key] = put(
            saver, key[0], ns=key[1], parent=heads.get(key), metadata=generate_metadata(step=i)
        )
        stored.append(where_cfg(heads[key]))
    assert [s[2] for s in stored] == sorted(s[2] for s in stored)
    return stored


def test_list_none_spans_all_threads_and_namespaces_newest_first(saver: Any) -> None:
    stored = _interleave(saver)
    newest_first = stored[::-1]

    assert [where(t) for t in saver.list(None)] == newest_first
    assert [where(t) for t in saver.list(None, limit=4)] == newest_first[:4]
    assert [where(t) for t in saver.list(None, filter={"step": 7})] == [stored[7]]
    assert [where(t) for t in saver.list(thread("t-b"))] == [
        s for s in newest_first if s[0] == "t-b"
    ]


def test_list_orders_by_checkpoint_id_not_by_insertion_order(saver: Any) -> None:
    ids = [new_id() for _ in range(6)]
    order = [3, 0, 5, 1, 4, 2]
    for i in order:
        put(saver, ("t-x", "t-y")[i % 2], checkpoint_id=ids[i])

    assert [t.checkpoint["id"] for t in saver.list(None)] == ids[::-1]
    assert [t.checkpoint["id"] for t in saver.list(thread("t-x"))] == [ids[4], ids[2], ids[0]]
    latest = saver.get_tuple(cfg("t-y"))
    assert latest is not None
    assert latest.checkpoint["id"] == ids[5]


async def test_alist_none_spans_all_threads_and_namespaces_newest_first(saver: Any) -> None:
    stored = _interleave(saver)

    assert [where(t) async for t in saver.alist(None)] == stored[::-1]
    assert [where(t) async for t in saver.alist(None, limit=2)] == stored[::-1][:2]


# --------------------------------------------------------------------------------------------
# 2. metadata filters
# --------------------------------------------------------------------------------------------

SQL_KEY = "a') OR 1=1 --"

FILTER_METADATA: dict[str, dict[str, Any]] = {
    "A": {
        "键 🔑": "värde ü",
        "key with spaces": "v",
        "dotted.key": 1,
        "quo\"te'd": "q",
        "[br]": "b",
        "$dollar": "d",
        SQL_KEY: "sql",
        "it's": "apostrophe",
        "": "empty key",
        "s": "",
        "i": 7,
        "f": 2.5,
        "n": -4,
        "zero": 0,
        "t": True,
        "maybe": None,
        "obj": {"a": 1, "b": [1, 2]},
        "arr": [1, 2, 3],
        "nest": {"b": 1},
        "mixed": [1, "two", None, {"x": [True]}],
        "big": 2**53 + 1,
        "accent": "é",
        "nul": "a\x00b",
        "huge": 2**70,
    },
    "B": {
        "键 🔑": "värde ü",
        "key with spaces": "w",
        "dotted.key": True,
        "s": "x",
        "i": 7,
        "f": 2.5,
        "n": -4,
        "zero": False,
        "t": 1,
        "obj": {"b": [1, 2], "a": 1},
        "arr": [3, 2, 1],
        "nest.b": 1,
        "mixed": [1, "two", None, {"x": [1]}],
        "big": 2**53,
        "accent": "e\u0301",
        "nul": "a\x00c",
        "huge": 2**70 + 1,
    },
    "C": {
        "键 🔑": "other",
        "maybe": "not none",
        "i": "7",
        "f": 2,
        "n": 4,
        "zero": None,
        "t": "true",
        "obj": {"a": 1},
        "arr": [1, 2],
    },
    "D": {},
}

FILTER_CASES = [
    ("unicode-key-and-value", {"键 🔑": "värde ü"}, "AB"),
    ("key-with-spaces", {"key with spaces": "w"}, "B"),
    ("dotted-key-int", {"dotted.key": 1}, "A"),
    ("dotted-key-true", {"dotted.key": True}, "B"),
    ("quotes-in-key", {"quo\"te'd": "q"}, "A"),
    ("apostrophe-key", {"it's": "apostrophe"}, "A"),
    ("brackets-in-key", {"[br]": "b"}, "A"),
    ("dollar-key", {"$dollar": "d"}, "A"),
    ("sql-looking-key", {SQL_KEY: "sql"}, "A"),
    ("empty-key", {"": "empty key"}, "A"),
    ("empty-string-value", {"s": ""}, "A"),
    ("string-value", {"s": "x"}, "B"),
    ("int", {"i": 7}, "AB"),
    ("int-as-string", {"i": "7"}, "C"),
    ("float", {"f": 2.5}, "AB"),
    ("int-not-float", {"f": 2}, "C"),
    ("negative", {"n": -4}, "AB"),
    ("positive-not-negative", {"n": 4}, "C"),
    ("zero-not-false", {"zero": 0}, "A"),
    ("false-not-zero", {"zero": False}, "B"),
    ("none-matches-none-and-missing", {"zero": None}, "CD"),
    ("true-not-one", {"t": True}, "A"),
    ("one-not-true", {"t": 1}, "B"),
    ("string-true", {"t": "true"}, "C"),
    ("none-matches-missing-key", {"maybe": None}, "ABD"),
    ("dict-key-order-irrelevant", {"obj": {"a": 1, "b": [1, 2]}}, "AB"),
    ("dict-key-order-irrelevant-2", {"obj": {"b": [1, 2], "a": 1}}, "AB"),
    ("dict-is-equality-not-containment", {"obj": {"a": 1}}, "C"),
    ("nested-list-order-matters", {"obj": {"a": 1, "b": [2, 1]}}, ""),
    ("list-order-matters", {"arr": [1, 2, 3]}, "A"),
    ("list-reversed", {"arr": [3, 2, 1]}, "B"),
    ("list-is-equality-not-prefix", {"arr": [1, 2]}, "C"),
    ("list-single", {"arr": [1]}, ""),
    ("nested-dict", {"nest": {"b": 1}}, "A"),
    ("dotted-key-is-not-a-path", {"nest.b": 1}, "B"),
    ("bracket-key-is-not-a-path", {"arr[0]": 1}, ""),
    ("dollar-path-key-is-not-a-path", {"$.i": 7}, ""),
    ("nested-true-not-one", {"mixed": [1, "two", None, {"x": [True]}]}, "A"),
    ("nested-one-not-true", {"mixed": [1, "two", None, {"x": [1]}]}, "B"),
    ("int-above-2-53", {"big": 2**53 + 1}, "A"),
    ("int-2-53", {"big": 2**53}, "B"),
    ("precomposed-accent", {"accent": "é"}, "A"),
    ("nul-in-text", {"nul": "a\x00b"}, "A"),
    ("nul-in-text-2", {"nul": "a\x00c"}, "B"),
    ("int-beyond-64-bits", {"huge": 2**70}, "A"),
    ("decomposed-accent", {"accent": "e\u0301"}, "B"),
    ("multi-key", {"i": 7, "f": 2.5, "key with spaces": "w"}, "B"),
    ("multi-key-with-none", {"i": 7, "maybe": None}, "AB"),
    ("multi-key-no-match", {"i": 7, "s": "nope"}, ""),
    ("malicious-key-missing", {"x') OR 1=1 --": "x"}, ""),
    ("malicious-key-quote", {"') OR '1'='1": 1}, ""),
    ("malicious-key-double-quote", {'" OR 1=1 --': "anything"}, ""),
    ("malicious-key-json-path", {'i" OR 1=1 OR "': 7}, ""),
    ("malicious-value", {"s": "' OR 1=1 --"}, ""),
    ("empty-filter", {}, "ABCD"),
]


@pytest.fixture
def filter_saver(saver: Any) -> tuple[Any, dict[str, str]]:
    name_by_id: dict[str, str] = {}
    for name, extra in FILTER_METADATA.items():
        config = put(saver, "meta", metadata={**generate_metadata(), **extra})
        name_by_id[cp_id(config)] = name
    return saver, name_by_id


@pytest.mark.parametrize(
    ("flt", "expected"), [pytest.param(f, e, id=i) for i, f, e in FILTER_CASES]
)
def test_metadata_filter_is_exact_typed_equality(
    filter_saver: tuple[Any, dict[str, str]], flt: dict[str, Any], expected: str
) -> None:
    saver, name_by_id = filter_saver
    newest_first = [n for n in "DCBA" if n in expected]

    assert [name_by_id[t.checkpoint["id"]] for t in saver.list(cfg("meta"), filter=flt)] == (
        newest_first
    )
    assert [name_by_id[t.checkpoint["id"]] for t in saver.list(None, filter=flt)] == (newest_first)
    assert [name_by_id[t.checkpoint["id"]] for t in saver.list(None, filter=flt, limit=1)] == (
        newest_first[:1]
    )


def test_metadata_filter_none_lists_everything(filter_saver: tuple[Any, dict[str, str]]) -> None:
    saver, name_by_id = filter_saver
    assert [name_by_id[t.checkpoint["id"]] for t in saver.list(None, filter=None)] == list("DCBA")


def test_metadata_round_trips_with_exact_types(filter_saver: tuple[Any, dict[str, str]]) -> None:
    saver, name_by_id = filter_saver
    for tup in saver.list(None):
        expected = {**generate_metadata(), **FILTER_METADATA[name_by_id[tup.checkpoint["id"]]]}
        assert strict(dict(tup.metadata)) == strict(expected)


async def test_alist_metadata_filter_distinguishes_true_from_one_and_zero_from_false(
    filter_saver: tuple[Any, dict[str, str]],
) -> None:
    saver, name_by_id = filter_saver

    async def names(flt: dict[str, Any]) -> list[str]:
        return [name_by_id[t.checkpoint["id"]] async for t in saver.alist(None, filter=flt)]

    assert await names({"t": True}) == ["A"]
    assert await names({"t": 1}) == ["B"]
    assert await names({"zero": 0}) == ["A"]
    assert await names({"zero": False}) == ["B"]
    assert await names({"maybe": None}) == ["D", "B", "A"]
    assert await names({SQL_KEY: "sql"}) == ["A"]
    assert await names({"x') OR 1=1 --": "x"}) == []


# --------------------------------------------------------------------------------------------
# 3. before / limit
# --------------------------------------------------------------------------------------------


def test_list_before_is_exclusive_and_combines_with_limit(saver: Any) -> None:
    t0 = put(saver, "t")
    t1 = put(saver, "t", parent=t0)
    u0 = put(saver, "u")
    t2 = put(saver, "t", parent=t1)
    gap = new_id()  # an id between t2 and t3 that is never stored
    t3 = put(saver, "t", parent=t2)
    t4 = put(saver, "t", parent=t3)
    ids = [cp_id(c) for c in (t0, t1, t2, t3, t4)]

    def listed(config: RunnableConfig | None = None, **kwargs: Any) -> list[str]:
        return [t.checkpoint["id"] for t in saver.list(config or cfg("t"), **kwargs)]

    assert listed(before=t2) == [ids[1], ids[0]]
    assert listed(before=t0) == []
    assert listed(before=t4, limit=2) == [ids[3], ids[2]]
    assert listed(before=t4, limit=10) == [ids[3], ids[2], ids[1], ids[0]]
    assert listed(before=cfg("t", checkpoint_id=gap)) == [ids[2], ids[1], ids[0]]
    assert listed(before=cfg("t", checkpoint_id=new_id())) == ids[::-1]
    assert listed(limit=0) == []
    assert listed(limit=-1) == []
    assert listed(limit=None) == ids[::-1]
    assert listed(limit=3) == ids[::-1][:3]
    assert [t.checkpoint["id"] for t in saver.list(None, before=t3)] == [
        ids[2],
        cp_id(u0),
        ids[1],
        ids[0],
    ]
    assert [t.checkpoint["id"] for t in saver.list(None, before=t3, limit=2)] == [
        ids[2],
        cp_id(u0),
    ]
    assert [t.checkpoint["id"] for t in saver.list(None, limit=0)] == []
    assert [t.checkpoint["id"] for t in saver.list(None, limit=-5)] == []


async def test_alist_before_and_limit_edges(saver: Any) -> None:
    configs = [put(saver, "t") for _ in range(4)]
    ids = [cp_id(c) for c in configs]

    assert [t.checkpoint["id"] async for t in saver.alist(cfg("t"), before=configs[2])] == [
        ids[1],
        ids[0],
    ]
    assert [t async for t in saver.alist(cfg("t"), limit=0)] == []
    assert [t async for t in saver.alist(cfg("t"), limit=-1)] == []
    assert [t.checkpoint["id"] async for t in saver.alist(None, before=configs[3], limit=1)] == [
        ids[2]
    ]


# --------------------------------------------------------------------------------------------
# 4. pending writes order
# --------------------------------------------------------------------------------------------

# (task_path, task_id, writes) in the scrambled order they are stored
TASK_WRITES: list[tuple[str, str, list[tuple[str, Any]]]] = [
    ("~__pregel_pull, zeta", "task-1", [("c", "z1-0"), ("d", "z1-1")]),
    ("", "task-9", [("input", "in-9")]),
    ("~__pregel_pull, alpha", "task-7", [(f"ch{i}", f"a7-{i}") for i in range(12)]),
    ("~__pregel_push, 0, é", "task-0", [("c", "e0-0")]),
    ("~__pregel_pull, alpha", "task-3", [("c", "a3-0")]),
    ("", "task-2", [("input", "in-2")]),
]


def _expected_writes() -> list[tuple[str, str, Any]]:
    rows = [
        (path, task_id, idx, channel, value)
        for path, task_id, writes in TASK_WRITES
        for idx, (channel, value) in enumerate(writes)
    ]
    rows.sort(key=lambda r: writes_sort_key(r[0], r[1], r[2]))
    expected = [(task_id, channel, value) for _, task_id, _, channel, value in rows]
    # spelled out, so a bug in the expectation cannot hide a bug in the saver
    assert [w[0] for w in expected] == (
        ["task-2", "task-9", "task-3"] + ["task-7"] * 12 + ["task-1"] * 2 + ["task-0"]
    )
    assert [w[1] for w in expected[3:15]] == [f"ch{i}" for i in range(12)]  # 10 after 9
    return expected


def test_pending_writes_come_back_in_writes_sort_key_order(saver: Any) -> None:
    expected = _expected_writes()
    first = put(saver, "t")
    saver.put_writes(first, [("other", "belongs to the first checkpoint")], "task-0", "")
    current = put(saver, "t", parent=first)
    for path, task_id, writes in TASK_WRITES:
        saver.put_writes(current, writes, task_id, path)

    assert writes_of(saver.get_tuple(cfg("t"))) == expected
    assert writes_of(saver.get_tuple(current)) == expected
    listed = list(saver.list(cfg("t")))
    assert [writes_of(t) for t in listed] == [
        expected,
        [("task-0", "other", "belongs to the first checkpoint")],
    ]
    assert writes_of(next(iter(saver.list(None, limit=1)))) == expected


async def test_apending_writes_come_back_in_writes_sort_key_order(saver: Any) -> None:
    expected = _expected_writes()
    current = await aput(saver, "t")
    for path, task_id, writes in TASK_WRITES:
        await saver.aput_writes(current, writes, task_id, path)

    assert writes_of(await saver.aget_tuple(cfg("t"))) == expected
    assert [writes_of(t) async for t in saver.alist(cfg("t"))] == [expected]


# --------------------------------------------------------------------------------------------
# 5. put_writes idempotency and special channels
# --------------------------------------------------------------------------------------------


def test_put_writes_repeated_task_and_index_is_stored_once_with_the_first_value(
    saver: Any,
) -> None:
    config = put(saver, "t")
    saver.put_writes(config, [("a", "first-a"), ("b", "first-b")], "task-1")
    saver.put_writes(config, [("a", "second-a"), ("b", "second-b")], "task-1")
    saver.put_writes(config, [("a", "third-a")], "task-1")

    assert writes_of(saver.get_tuple(config)) == [
        ("task-1", "a", "first-a"),
        ("task-1", "b", "first-b"),
    ]

    saver.put_writes(config, [("a", "x"), ("b", "y"), ("c", "first-c")], "task-1")
    saver.put_writes(config, [("a", "other task")], "task-2")
    assert writes_of(saver.get_tuple(config)) == [
        ("task-1", "a", "first-a"),
        ("task-1", "b", "first-b"),
        ("task-1", "c", "first-c"),
        ("task-2", "a", "other task"),
    ]


SPECIAL_EXPECTED = [
    ("task-1", RESUME, "resume-2"),  # idx -4
    ("task-1", INTERRUPT, ["interrupt-2"]),  # idx -3
    ("task-1", SCHEDULED, "scheduled-1"),  # idx -2
    ("task-1", ERROR, "boom-2"),  # idx -1
    ("task-1", "a", "regular-0"),  # idx 0
    ("task-2", ERROR, "other task"),
]


def test_special_channel_writes_replace_earlier_ones_and_coexist_with_regular_writes(
    saver: Any,
) -> None:
    config = put(saver, "t")
    saver.put_writes(config, [("a", "regular-0"), (ERROR, "boom-1")], "task-1")
    saver.put_writes(config, [(ERROR, "boom-2")], "task-1")
    saver.put_writes(config, [(INTERRUPT, ["interrupt-1"])], "task-1")
    saver.put_writes(config, [(INTERRUPT, ["interrupt-2"])], "task-1")
    saver.put_writes(config, [(SCHEDULED, "scheduled-1"), (RESUME, "resume-1")], "task-1")
    saver.put_writes(config, [(RESUME, "resume-2")], "task-1")
    saver.put_writes(config, [("a", "regular changed")], "task-1")
    saver.put_writes(config, [(ERROR, "other task")], "task-2")

    assert writes_of(saver.get_tuple(config)) == SPECIAL_EXPECTED
    assert writes_of(next(iter(saver.list(cfg("t"))))) == SPECIAL_EXPECTED


async def test_aput_writes_idempotency_and_special_channel_replacement(saver: Any) -> None:
    config = await aput(saver, "t")
    await saver.aput_writes(config, [("a", "regular-0"), (ERROR, "boom-1")], "task-1")
    await saver.aput_writes(config, [(ERROR, "boom-2")], "task-1")
    await saver.aput_writes(config, [(INTERRUPT, ["interrupt-1"])], "task-1")
    await saver.aput_writes(config, [(INTERRUPT, ["interrupt-2"])], "task-1")
    await saver.aput_writes(config, [(SCHEDULED, "scheduled-1"), (RESUME, "resume-1")], "task-1")
    await saver.aput_writes(config, [(RESUME, "resume-2")], "task-1")
    await saver.aput_writes(config, [("a", "regular changed")], "task-1")
    await saver.aput_writes(config, [(ERROR, "other task")], "task-2")

    assert writes_of(await saver.aget_tuple(config)) == SPECIAL_EXPECTED


# --------------------------------------------------------------------------------------------
# 6. get_next_version
# --------------------------------------------------------------------------------------------


def test_get_next_version_strictly_increases_over_1000_calls(saver: Any) -> None:
    current = saver.get_next_version(None, None)
    for _ in range(1000):
        following = saver.get_next_version(current, None)
        assert type(following) is type(current)
        assert current < following, f"{following!r} is not greater than {current!r}"
        current = following


def test_get_next_version_accepts_none_ints_and_its_own_outputs(saver: Any) -> None:
    from_none = saver.get_next_version(None, None)
    assert from_none < saver.get_next_version(from_none, None)
    from_four = [saver.get_next_version(4, None) for _ in range(20)]
    from_five = [saver.get_next_version(5, None) for _ in range(20)]
    assert max(from_four) < min(from_five)
    for version in from_five:
        assert version < saver.get_next_version(version, None)
    assert saver.get_next_version(0, None) < saver.get_next_version(1, None)


# LangGraph's own savers write "<32-digit counter>.<random float>", as statekeeper did before
LANGGRAPH_VERSION = "00000000000000000000000000000075.0.3294291907048198"


def test_get_next_version_keeps_langgraphs_counter_with_a_short_random_part(saver: Any) -> None:
    version = saver.get_next_version(LANGGRAPH_VERSION, None)
    counter, random_part = version.split(".")
    assert counter == f"{76:032}"  # read by LangGraph's savers as int(v.split(".")[0])
    assert len(random_part) == 10
    assert set(random_part) <= set("0123456789abcdefghijklmnopqrstuvwxyz")
    assert LANGGRAPH_VERSION < version < saver.get_next_version(version, None)
    # a version's random part tells forks apart: 200 forks of one checkpoint, 200 versions
    assert len({saver.get_next_version(LANGGRAPH_VERSION, None) for _ in range(200)}) == 200


def test_a_thread_with_versions_of_the_older_form_goes_on_with_the_new_one(saver: Any) -> None:
    """A checkpoint whose versions have LangGraph's random float is continued: its values
    are read back, and a channel left unchanged keeps its older version's value."""
    config = {"configurable": {"thread_id": "older-versions", "checkpoint_ns": ""}}
    versions = {"a": LANGGRAPH_VERSION, "b": LANGGRAPH_VERSION.replace("75", "74", 1)}
    first = generate_checkpoint(
        channel_values={"a": "old-a", "b": "old-b"}, channel_versions=versions
    )
    stored = saver.put(config, first, generate_metadata(step=0), versions)
    newer = saver.get_next_version(max(versions.values()), None)
    second = generate_checkpoint(
        channel_values={"a": "new-a", "b": "old-b"}, channel_versions={**versions, "a": newer}
    )
    stored = saver.put(stored, second, generate_metadata(step=1), {"a": newer})
    latest = saver.get_tuple(config)
    assert latest is not None
    assert latest.config == stored
    assert latest.checkpoint["channel_values"] == {"a": "new-a", "b": "old-b"}
    assert latest.checkpoint["channel_versions"] == {**versions, "a": newer}


# --------------------------------------------------------------------------------------------
# 7. odd thread ids and namespaces
# --------------------------------------------------------------------------------------------

ODD_IDS = [
    "🎉🚀",
    "线程-中文",
    "שלום עולם",
    "مرحبا",
    "e\u0301",
    "é",
    " ",
    " \t\n",
    "../../etc/passwd",
    "a/b\\c",
    "a\x00b",
    "a",
    "a ",
    "abc",
    "ABC",
    "x" * 10_000,
    "x" * 9_999,
    "*",
    "?",
    "%",
    "_",
    "a%",
    "a_c",
    "[a]",
    "'; DROP TABLE checkpoints; --",
    "NULL",
]
assert len(set(ODD_IDS)) == len(ODD_IDS)


def test_odd_thread_ids_round_trip_and_are_isolated(saver: Any) -> None:
    stored = {}
    for tid in ODD_IDS:
        stored[tid] = put(saver, tid, values={"who": tid})
        saver.put_writes(stored[tid], [("who", tid)], "task")

    for tid in ODD_IDS:
        tup = saver.get_tuple(cfg(tid))
        assert tup is not None, f"thread {tid[:20]!r} is missing"
        assert where(tup) == (tid, "", cp_id(stored[tid]))
        assert tup.checkpoint["channel_values"] == {"who": tid}
        assert writes_of(tup) == [("task", "who", tid)]
        assert [where(t) for t in saver.list(thread(tid))] == [where_cfg(stored[tid])]
    assert thread_ids(saver) == sorted(ODD_IDS)


def test_wildcard_like_thread_ids_only_touch_their_own_thread(saver: Any) -> None:
    for tid in ODD_IDS:
        first = put(saver, tid, values={"who": tid})
        put(saver, tid, parent=first, values={"who": tid})
    remaining = set(ODD_IDS)

    for victim in ["%", "_", "*", "?", "a", "x" * 9_999, "../../etc/passwd", "NULL"]:
        saver.delete_thread(victim)
        remaining.discard(victim)
        assert thread_ids(saver) == sorted(remaining), f"delete_thread({victim!r})"

    saver.prune(["a%"], strategy="keep_latest")
    saver.prune(["a_c"], strategy="delete")
    remaining.discard("a_c")
    assert thread_ids(saver) == sorted(remaining)
    counts = {tid: len(list(saver.list(thread(tid)))) for tid in remaining}
    assert counts == {tid: 1 if tid == "a%" else 2 for tid in remaining}

    saver.copy_thread("[a]", "copy of [a]")
    assert [where(t)[0] for t in saver.list(thread("copy of [a]"))] == ["copy of [a]"] * 2
    assert [t.checkpoint["channel_values"] for t in saver.list(thread("copy of [a]"))] == [
        {"who": "[a]"}
    ] * 2


def test_wildcard_like_run_ids_only_delete_their_own_run(saver: Any) -> None:
    runs = ["run-1", "run_1", "run-%", "RUN-1", "%", "_"]
    for run in runs:
        put(saver, f"thread of {run}", metadata={**generate_metadata(), "run_id": run})

    saver.delete_for_runs(["run_1", "%"])
    assert thread_ids(saver) == sorted(f"thread of {r}" for r in ["run-1", "run-%", "RUN-1", "_"])
    saver.delete_for_runs(["_", "run-%"])
    assert thread_ids(saver) == sorted(f"thread of {r}" for r in ["run-1", "RUN-1"])


def test_odd_checkpoint_namespaces_round_trip_and_are_isolated(saver: Any) -> None:
    namespaces = ["", *ODD_IDS]
    stored = {}
    for ns in namespaces:
        stored[ns] = put(saver, "t", ns=ns, values={"who": ns})
        saver.put_writes(stored[ns], [("who", ns)], "task")

    for ns in namespaces:
        tup = saver.get_tuple(cfg("t", ns))
        assert tup is not None, f"namespace {ns[:20]!r} is missing"
        assert where(tup) == ("t", ns, cp_id(stored[ns]))
        assert tup.checkpoint["channel_values"] == {"who": ns}
        assert writes_of(tup) == [("task", "who", ns)]
        assert [where(t) for t in saver.list(cfg("t", ns))] == [where_cfg(stored[ns])]
    assert sorted(where(t)[1] for t in saver.list(thread("t"))) == sorted(namespaces)


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param("\ud800", id="lone-high-surrogate"),
        pytest.param("a\udfffb", id="lone-low-surrogate-inside"),
        pytest.param("", id="empty"),
    ],
)
def test_invalid_thread_id_raises_invalid_id_error_and_stores_nothing(saver: Any, bad: str) -> None:
    ok = put(saver, "ok")

    with pytest.raises(InvalidIdError):
        put(saver, bad, values={"a": 1})
    with pytest.raises(InvalidIdError):
        saver.put_writes(cfg(bad, checkpoint_id=cp_id(ok)), [("a", 1)], "task")

    assert [where(t) for t in saver.list(None)] == [where_cfg(ok)]
    assert writes_of(saver.get_tuple(ok)) == []
    assert issubclass(InvalidIdError, StatekeeperError)


@pytest.mark.parametrize("bad", ["\ud800", "child:\udc00"])
def test_namespace_with_lone_surrogate_raises_invalid_id_error_and_stores_nothing(
    saver: Any, bad: str
) -> None:
    ok = put(saver, "t")

    with pytest.raises(InvalidIdError):
        put(saver, "t", ns=bad, values={"a": 1})
    with pytest.raises(InvalidIdError):
        saver.put_writes(cfg("t", bad, cp_id(ok)), [("a", 1)], "task")

    assert [where(t) for t in saver.list(None)] == [where_cfg(ok)]


async def test_aput_rejects_invalid_thread_ids_and_accepts_odd_ones(saver: Any) -> None:
    with pytest.raises(InvalidIdError):
        await aput(saver, "\ud800")
    with pytest.raises(InvalidIdError):
        await aput(saver, "")
    stored = await aput(saver, "a\x00b", values={"who": "nul"})
    await aput(saver, "a", values={"who": "plain"})

    tup = await saver.aget_tuple(cfg("a\x00b"))
    assert tup is not None
    assert where(tup) == where_cfg(stored)
    assert tup.checkpoint["channel_values"] == {"who": "nul"}
    assert sorted([where(t)[0] async for t in saver.alist(None)]) == ["a", "a\x00b"]


# --------------------------------------------------------------------------------------------
# 8. NUL and lone surrogates in values
# --------------------------------------------------------------------------------------------


def test_nul_characters_in_values_and_writes_round_trip_exactly(saver: Any) -> None:
    values = {"s": "a\x00b", "only": "\x00", "nested": {"k\x00ey": ["\x00", "x\x00"]}}
    config = put(saver, "t", values=values)
    saver.put_writes(config, [("s", "w\x00v"), ("nested", {"\x00": "\x00\x00"})], "task")

    tup = saver.get_tuple(cfg("t"))
    assert tup is not None
    assert strict(tup.checkpoint["channel_values"]) == strict(values)
    assert strict(writes_of(tup)) == strict(
        [("task", "s", "w\x00v"), ("task", "nested", {"\x00": "\x00\x00"})]
    )


SURROGATE_VALUES = [
    pytest.param("x\ud800y", id="str"),
    pytest.param(["fine", "x\udfff"], id="inside-list"),
    pytest.param({"k": ["\ud800"]}, id="inside-dict-value"),
    pytest.param({"\udc80": 1}, id="dict-key"),
    pytest.param(HumanMessage(content="x\ud800"), id="inside-message"),
]


@pytest.mark.parametrize("bad", SURROGATE_VALUES)
def test_channel_value_with_lone_surrogate_round_trips_or_raises_and_stores_nothing(
    saver: Any, bad: Any
) -> None:
    previous = put(saver, "t", values={"a": "before"})
    before = snapshot(saver)
    attempted = new_id()
    number = next(_VERSION_COUNTER)

    try:
        put(
            saver,
            "t",
            parent=previous,
            values={"good": "new", "a": bad},
            versions={"good": number, "a": number},
            checkpoint_id=attempted,
        )
    except SerializationError:
        assert snapshot(saver) == before
        latest = saver.get_tuple(cfg("t"))
        assert latest is not None
        assert latest.checkpoint["id"] == cp_id(previous)
        assert saver.get_tuple(cfg("t", checkpoint_id=attempted)) is None
        # the blob of the failed put's good channel was not left behind either
        probe = put(saver, "t", parent=previous, versions={"good": number}, new_versions={})
        assert values_at(saver, probe) == {}
        return
    stored = values_at(saver, cfg("t", checkpoint_id=attempted))
    assert strict(stored) == strict({"good": "new", "a": bad}), "value came back altered"


@pytest.mark.parametrize("bad", SURROGATE_VALUES)
def test_write_value_with_lone_surrogate_round_trips_or_raises_and_stores_nothing(
    saver: Any, bad: Any
) -> None:
    config = put(saver, "t")
    saver.put_writes(config, [("a", "kept")], "task-0")

    try:
        saver.put_writes(config, [("ok", "fine"), ("bad", bad)], "task-1")
    except SerializationError:
        assert writes_of(saver.get_tuple(config)) == [("task-0", "a", "kept")]
        return
    assert strict(writes_of(saver.get_tuple(config))) == strict(
        [("task-0", "a", "kept"), ("task-1", "ok", "fine"), ("task-1", "bad", bad)]
    ), "value came back altered"


def test_metadata_with_lone_surrogate_round_trips_or_raises_and_stores_nothing(
    saver: Any,
) -> None:
    previous = put(saver, "t")
    before = snapshot(saver)
    metadata = {**generate_metadata(), "note": "x\ud800", "nested": {"k": ["\udfff"]}}

    try:
        stored = put(saver, "t", parent=previous, metadata=metadata)
    except SerializationError:
        assert snapshot(saver) == before
        return
    tup = saver.get_tuple(stored)
    assert tup is not None
    assert strict(dict(tup.metadata)) == strict(metadata), "metadata came back altered"


async def test_aput_value_with_lone_surrogate_round_trips_or_raises_and_stores_nothing(
    saver: Any,
) -> None:
    previous = await aput(saver, "t", values={"a": "before"})
    attempted = new_id()

    try:
        await aput(saver, "t", parent=previous, values={"a": "x\ud800"}, checkpoint_id=attempted)
    except SerializationError:
        latest = await saver.aget_tuple(cfg("t"))
        assert latest is not None
        assert latest.checkpoint["id"] == cp_id(previous)
        assert len([t async for t in saver.alist(cfg("t"))]) == 1
    else:
        tup = await saver.aget_tuple(cfg("t", checkpoint_id=attempted))
        assert tup is not None
        assert tup.checkpoint["channel_values"] == {"a": "x\ud800"}

    try:
        await saver.aput_writes(previous, [("ok", 1), ("bad", ["\ud800"])], "task")
    except SerializationError:
        assert writes_of(await saver.aget_tuple(previous)) == []
    else:
        assert writes_of(await saver.aget_tuple(previous)) == [
            ("task", "ok", 1),
            ("task", "bad", ["\ud800"]),
        ]


# --------------------------------------------------------------------------------------------
# 9. exact round trip of values
# --------------------------------------------------------------------------------------------


class Ticket(pydantic.BaseModel):
    id: int
    tags: list[str]
    when: datetime | None = None


_RANDOM_TEXT = random.Random(0).randbytes(500_000).hex()  # 1 MB that barely compresses

ROUND_TRIP_VALUES = [
    pytest.param(b"\x00\xff raw", id="bytes"),
    pytest.param(b"", id="empty-bytes"),
    pytest.param(bytearray(b"\x01\x02"), id="bytearray"),
    pytest.param(None, id="none"),
    pytest.param("", id="empty-str"),
    pytest.param([], id="empty-list"),
    pytest.param({}, id="empty-dict"),
    pytest.param(0, id="zero"),
    pytest.param(False, id="false"),
    pytest.param(-(2**63), id="min-int64"),
    pytest.param("x" * 1_000_000, id="1MB-repetitive-str"),
    pytest.param(_RANDOM_TEXT, id="1MB-random-str"),
    pytest.param(
        {"a": [1, {"b": {"c": [None, True, 0, 1.5, "s", b"raw", {1, 2}]}}], "d": {"e": []}},
        id="nested-containers",
    ),
    pytest.param(datetime(2024, 2, 29, 23, 59, 59, 123456, tzinfo=UTC), id="datetime-utc"),
    pytest.param(
        datetime(2024, 2, 29, 12, 0, tzinfo=timezone(timedelta(hours=5, minutes=30))),
        id="datetime-offset",
    ),
    pytest.param(datetime(2024, 2, 29, 12, 0), id="datetime-naive"),
    pytest.param(HumanMessage(content="hello ✓", id="m1"), id="human-message"),
    pytest.param(
        AIMessage(
            content="",
            id="m2",
            tool_calls=[
                {"name": "search", "args": {"q": "x", "n": 2}, "id": "call-1", "type": "tool_call"}
            ],
        ),
        id="ai-message-with-tool-calls",
    ),
    pytest.param([HumanMessage("q"), AIMessage("a")], id="message-list"),
    pytest.param(Ticket(id=1, tags=["a", "b"], when=datetime(2024, 1, 1, tzinfo=UTC)), id="model"),
    pytest.param({"tickets": [Ticket(id=2, tags=[])]}, id="model-nested"),
]


@pytest.mark.parametrize("value", ROUND_TRIP_VALUES)
def test_channel_and_write_values_round_trip_exactly(saver: Any, value: Any) -> None:
    config = put(saver, "t", values={"v": value, "other": 1})
    saver.put_writes(config, [("v", value)], "task")

    for tup in (saver.get_tuple(cfg("t")), next(iter(saver.list(cfg("t"))))):
        assert tup is not None
        assert strict(tup.checkpoint["channel_values"]) == strict({"v": value, "other": 1})
        assert strict(writes_of(tup)) == strict([("task", "v", value)])


# --------------------------------------------------------------------------------------------
# 10. new_versions
# --------------------------------------------------------------------------------------------


def test_only_channels_in_new_versions_are_stored(saver: Any) -> None:
    v = version_maker(saver)
    c1 = put(saver, "t", values={"a": "a@1"}, versions={"a": v(1)})
    c2 = put(
        saver,
        "t",
        parent=c1,
        values={"a": "stale: a is not in new_versions", "b": "b@1"},
        versions={"a": v(1), "b": v(1)},
        new_versions={"b": v(1)},
    )
    c3 = put(saver, "t", parent=c2, versions={"a": v(2), "b": v(1)}, new_versions={"a": v(2)})
    c4 = put(
        saver,
        "t",
        parent=c3,
        values={"a": "a@3"},
        versions={"a": v(3), "b": v(1), "never": v(7)},
        new_versions={"a": v(3)},
    )

    assert values_at(saver, c1) == {"a": "a@1"}
    assert values_at(saver, c2) == {"a": "a@1", "b": "b@1"}
    assert values_at(saver, c3) == {"b": "b@1"}  # a's new version has no value
    assert values_at(saver, c4) == {"a": "a@3", "b": "b@1"}
    tup = saver.get_tuple(c4)
    assert tup is not None
    assert strict(tup.checkpoint["channel_versions"]) == strict(
        {"a": v(3), "b": v(1), "never": v(7)}
    )


def test_stored_blobs_are_not_visible_from_other_namespaces_or_threads(saver: Any) -> None:
    v = version_maker(saver)
    put(saver, "t", values={"a": "a@1"}, versions={"a": v(1)})

    other_ns = put(saver, "t", ns="child:1", versions={"a": v(1)}, new_versions={})
    other_thread = put(saver, "u", versions={"a": v(1)}, new_versions={})

    assert values_at(saver, other_ns) == {}
    assert values_at(saver, other_thread) == {}


# --------------------------------------------------------------------------------------------
# 11. copy_thread
# --------------------------------------------------------------------------------------------


def test_copy_thread_copies_the_whole_chain_with_parents_metadata_values_and_writes(
    saver: Any,
) -> None:
    v = version_maker(saver)
    src = populate(saver, "src", v)
    populate(saver, "bystander", v)
    src_before = snapshot(saver, thread("src"))
    bystander_before = snapshot(saver, thread("bystander"))

    saver.copy_thread("src", "dst")

    assert snapshot(saver, thread("src")) == src_before
    copied = list(saver.list(thread("dst")))
    expected = [view(t, with_thread=False) for t in saver.list(thread("src"))]
    assert [view(t, with_thread=False) for t in copied] == expected
    for tup in copied:
        assert where(tup)[0] == "dst"
        if tup.parent_config is not None:
            assert where_cfg(tup.parent_config)[0] == "dst"
    assert [t.parent_config is None for t in copied] == [False, False, True, False, True]
    latest_root = saver.get_tuple(cfg("dst"))
    latest_child = saver.get_tuple(cfg("dst", "child:1"))
    assert latest_root is not None
    assert latest_child is not None
    assert latest_root.checkpoint["id"] == cp_id(src["r2"])
    assert latest_child.checkpoint["id"] == cp_id(src["k1"])

    # the copy does not depend on the source's rows
    saver.delete_thread("src")
    assert [view(t, with_thread=False) for t in saver.list(thread("dst"))] == expected
    assert_populated_intact(saver, {name: cfg("dst", *where_cfg(c)[1:]) for name, c in src.items()})
    assert snapshot(saver, thread("bystander")) == bystander_before


@pytest.mark.parametrize("target_ns", ["", "child:9"])
def test_copy_thread_into_a_thread_with_checkpoints_raises_and_changes_nothing(
    saver: Any, target_ns: str
) -> None:
    v = version_maker(saver)
    populate(saver, "src", v)
    put(saver, "target", ns=target_ns, values={"mine": 1})
    before = snapshot(saver)

    with pytest.raises(ThreadExistsError):
        saver.copy_thread("src", "target")
    with pytest.raises(ThreadExistsError):
        saver.copy_thread("src", "src")

    assert snapshot(saver) == before


def test_copy_thread_from_a_missing_source_is_a_noop(saver: Any) -> None:
    v = version_maker(saver)
    populate(saver, "present", v)
    before = snapshot(saver)

    saver.copy_thread("missing", "new")

    assert snapshot(saver) == before
    assert list(saver.list(thread("new"))) == []


async def test_acopy_thread_copies_and_refuses_existing_targets(saver: Any) -> None:
    v = version_maker(saver)
    populate(saver, "src", v)
    put(saver, "taken")
    before = snapshot(saver)

    with pytest.raises(ThreadExistsError):
        await saver.acopy_thread("src", "taken")
    assert snapshot(saver) == before

    await saver.acopy_thread("src", "dst")
    assert [view(t, with_thread=False) async for t in saver.alist(thread("dst"))] == [
        view(t, with_thread=False) for t in saver.list(thread("src"))
    ]


# --------------------------------------------------------------------------------------------
# 12. prune
# --------------------------------------------------------------------------------------------


def test_prune_keep_latest_keeps_newest_per_namespace_with_writes_and_loadable_values(
    saver: Any,
) -> None:
    v = version_maker(saver)
    p = populate(saver, "p", v)
    q = populate(saver, "q", v)
    keep = populate(saver, "keep", v)
    keep_before = snapshot(saver, thread("keep"))
    heads_before = [
        view(t, with_parent=False) for t in (saver.get_tuple(p["k1"]), saver.get_tuple(p["r2"]))
    ]

    saver.prune(["p", "q", "missing"], strategy="keep_latest")

    for name, configs in (("p", p), ("q", q)):
        assert [where(t) for t in saver.list(thread(name))] == [
            where_cfg(configs["k1"]),
            where_cfg(configs["r2"]),
        ]
        assert_populated_intact(saver, {"r2": configs["r2"], "k1": configs["k1"]})
        for gone in ("r0", "r1", "k0"):
            assert saver.get_tuple(configs[gone]) is None
    assert [view(t, with_parent=False) for t in saver.list(thread("p"))] == heads_before
    assert snapshot(saver, thread("keep")) == keep_before
    assert_populated_intact(saver, keep)

    # the thread goes on from the kept head; the deleted rows' writes do not come back
    nxt = put(saver, "p", parent=p["r2"], versions={"a": v(2), "b": v(1)}, new_versions={})
    assert values_at(saver, nxt) == {"a": "a1", "b": ["b0"]}
    reborn = put(saver, "p", checkpoint_id=cp_id(p["r0"]))
    assert writes_of(saver.get_tuple(reborn)) == []


def test_prune_delete_removes_everything_of_those_threads_only(saver: Any) -> None:
    v = version_maker(saver)
    p = populate(saver, "p", v)
    populate(saver, "q", v)
    keep = populate(saver, "keep", v)
    keep_before = snapshot(saver, thread("keep"))

    saver.prune(["p", "q"], strategy="delete")

    assert list(saver.list(thread("p"))) == []
    assert list(saver.list(thread("q"))) == []
    assert snapshot(saver, thread("keep")) == keep_before
    assert_populated_intact(saver, keep)
    # nothing of p is left behind: neither writes nor blobs
    reborn = put(
        saver, "p", checkpoint_id=cp_id(p["r2"]), versions={"a": v(2), "b": v(1)}, new_versions={}
    )
    assert values_at(saver, reborn) == {}
    assert writes_of(saver.get_tuple(reborn)) == []


def test_prune_with_unknown_strategy_raises_configuration_error_and_deletes_nothing(
    saver: Any,
) -> None:
    v = version_maker(saver)
    populate(saver, "p", v)
    before = snapshot(saver)

    with pytest.raises(ConfigurationError):
        saver.prune(["p"], strategy="keep_oldest")

    assert snapshot(saver) == before


@pytest.mark.parametrize("limit", [1.5, True, "2", float("nan")])
async def test_a_list_limit_that_is_no_whole_number_is_refused_before_any_query(
    saver: Any, limit: Any
) -> None:
    """A float limit made one backend page forever, and others answered with an SQL or
    Lua error: it is a ConfigurationError, for ``list`` and ``alist``, with a thread or
    across threads."""
    v = version_maker(saver)
    populate(saver, "t", v)
    for config in (thread("t"), None):
        with pytest.raises(ConfigurationError, match="limit must be a whole number"):
            list(saver.list(config, limit=limit))
        with pytest.raises(ConfigurationError, match="limit must be a whole number"):
            [item async for item in saver.alist(config, limit=limit)]
    assert len(list(saver.list(thread("t"), limit=1))) == 1


def test_one_string_of_ids_is_refused_not_read_as_one_id_per_character(saver: Any) -> None:
    """``prune("ab")`` would delete threads "a" and "b" (and ``delete_for_runs("rb")``
    runs "r" and "b") if a string were iterated as ids: it is refused, nothing deleted."""
    v = version_maker(saver)
    for thread_id in ("a", "b", "ab"):
        populate(saver, thread_id, v)
    before = snapshot(saver)
    for strategy in ("delete", "keep_latest"):
        with pytest.raises(InvalidIdError, match="not one string"):
            saver.prune("ab", strategy=strategy)
    with pytest.raises(InvalidIdError, match="not one string"):
        saver.delete_for_runs("rb")
    with pytest.raises(InvalidIdError, match="list of thread ids"):
        saver.prune(None)
    assert snapshot(saver) == before


def test_a_checkpoint_id_that_is_no_string_is_refused_before_anything_is_stored(
    saver: Any,
) -> None:
    """Stored as text, an int id would no longer be the one inside the checkpoint (the
    Redis backend then read the whole thread as damaged)."""
    v = version_maker(saver)
    populate(saver, "t", v)
    before = snapshot(saver)
    odd = generate_checkpoint()
    odd["id"] = 5
    with pytest.raises(InvalidIdError, match="checkpoint id must be a string"):
        saver.put(cfg("t"), odd, generate_metadata(step=9), {})
    assert snapshot(saver) == before
    assert saver.get_tuple(cfg("t")) is not None


async def test_aprune_with_unknown_strategy_raises_and_keep_latest_works(saver: Any) -> None:
    v = version_maker(saver)
    p = populate(saver, "p", v)
    before = snapshot(saver)

    with pytest.raises(ConfigurationError):
        await saver.aprune(["p"], strategy="everything")
    assert snapshot(saver) == before

    await saver.aprune(["p"])
    assert [where(t) async for t in saver.alist(thread("p"))] == [
        where_cfg(p["k1"]),
        where_cfg(p["r2"]),
    ]
    assert_populated_intact(saver, {"r2": p["r2"], "k1": p["k1"]})


# --------------------------------------------------------------------------------------------
# 13. delete_for_runs
# --------------------------------------------------------------------------------------------


def _runs(saver: Any) -> dict[str, RunnableConfig]:
    """run-1 starts t1 (root and child namespace) and t2; run-2 continues both; run-3 is t3."""
    v = version_maker(saver)

    def md(run: str) -> CheckpointMetadata:
        return {**generate_metadata(), "run_id": run}

    c: dict[str, RunnableConfig] = {}
    c["t1-run1"] = put(
        saver,
        "t1",
        values={"x": "x1", "y": "y1"},
        versions={"x": v(1), "y": v(1)},
        metadata=md("run-1"),
    )
    saver.put_writes(c["t1-run1"], [("x", "w-t1-run1")], "task-1")
    c["t1-child-run1"] = put(
        saver, "t1", ns="child:1", values={"c": "c1"}, versions={"c": v(1)}, metadata=md("run-1")
    )
    saver.put_writes(c["t1-child-run1"], [("c", "w-child")], "task-1")
    c["t2-run1"] = put(
        saver, "t2", values={"x": "t2-x1"}, versions={"x": v(1)}, metadata=md("run-1")
    )
    c["t1-run2"] = put(
        saver,
        "t1",
        parent=c["t1-run1"],
        values={"y": "y2"},
        versions={"x": v(1), "y": v(2)},
        new_versions={"y": v(2)},
        metadata=md("run-2"),
    )
    saver.put_writes(c["t1-run2"], [("x", "w-t1-run2")], "task-2")
    c["t2-run2"] = put(
        saver,
        "t2",
        parent=c["t2-run1"],
        versions={"x": v(1)},
        new_versions={},
        metadata=md("run-2"),
    )
    c["t3-run3"] = put(saver, "t3", values={"x": "t3"}, versions={"x": v(1)}, metadata=md("run-3"))
    return c


def test_delete_for_runs_removes_only_those_runs_and_survivors_still_load(saver: Any) -> None:
    c = _runs(saver)
    survivors = ("t1-run2", "t2-run2", "t3-run3")
    before = {name: view(saver.get_tuple(c[name]), with_parent=False) for name in survivors}

    saver.delete_for_runs(["run-1"])

    assert [where(t) for t in saver.list(None)] == [where_cfg(c[n]) for n in survivors[::-1]]
    for name in survivors:
        assert view(saver.get_tuple(c[name]), with_parent=False) == before[name], name
    assert values_at(saver, c["t1-run2"]) == {"x": "x1", "y": "y2"}
    assert values_at(saver, c["t2-run2"]) == {"x": "t2-x1"}
    assert writes_of(saver.get_tuple(c["t1-run2"])) == [("task-2", "x", "w-t1-run2")]
    # the deleted checkpoints' writes are gone too
    for gone in ("t1-run1", "t1-child-run1"):
        thread_id, ns, checkpoint_id = where_cfg(c[gone])
        reborn = put(saver, thread_id, ns=ns, checkpoint_id=checkpoint_id)
        assert writes_of(saver.get_tuple(reborn)) == [], gone
    saver.delete_for_runs([])  # an empty list is a no-op
    assert len(list(saver.list(None))) == 5

    saver.delete_for_runs(["run-2", "no-such-run"])
    assert values_at(saver, c["t3-run3"]) == {"x": "t3"}
    assert [where(t) for t in saver.list(thread("t3"))] == [where_cfg(c["t3-run3"])]
    assert saver.get_tuple(c["t1-run2"]) is None
    assert saver.get_tuple(c["t2-run2"]) is None


async def test_adelete_for_runs_keeps_survivor_values_loadable(saver: Any) -> None:
    c = _runs(saver)

    await saver.adelete_for_runs(["run-1"])

    assert [where(t) async for t in saver.alist(None)] == [
        where_cfg(c[n]) for n in ("t3-run3", "t2-run2", "t1-run2")
    ]
    tup = await saver.aget_tuple(c["t1-run2"])
    assert tup is not None
    assert tup.checkpoint["channel_values"] == {"x": "x1", "y": "y2"}


# --------------------------------------------------------------------------------------------
# 14. delete_thread
# --------------------------------------------------------------------------------------------


def test_delete_thread_removes_every_namespace_of_that_thread_only(saver: Any) -> None:
    v = version_maker(saver)  # both threads use the same version strings
    a = populate(saver, "a", v)
    b = populate(saver, "b", v)
    b_before = snapshot(saver, thread("b"))

    saver.delete_thread("a")

    assert list(saver.list(thread("a"))) == []
    assert saver.get_tuple(cfg("a", "child:1")) is None
    assert snapshot(saver, thread("b")) == b_before
    assert_populated_intact(saver, b)
    reborn = put(
        saver, "a", checkpoint_id=cp_id(a["r2"]), versions={"a": v(2), "b": v(1)}, new_versions={}
    )
    assert values_at(saver, reborn) == {}
    assert writes_of(saver.get_tuple(reborn)) == []


# --------------------------------------------------------------------------------------------
# 15. close and reopen
# --------------------------------------------------------------------------------------------


def test_everything_survives_close_and_reopen(backend: Any, url: str) -> None:
    if not backend.persistent:
        pytest.skip(f"{backend.name} does not keep data across close()")
    first = open_checkpointer(url)
    v = version_maker(first)
    populated = populate(first, "a", v)
    populate(first, "b", v, run_id="run-2")
    odd = put(first, "🎉", values={"bytes": b"\x00", "msg": HumanMessage("hi"), "nul": "a\x00b"})
    for path, task_id, writes in TASK_WRITES:
        first.put_writes(odd, writes, task_id, path)
    before = snapshot(first)
    filtered_before = [where(t) for t in first.list(None, filter={"run_id": "run-2"})]
    first.close()

    with open_checkpointer(url) as reopened:
        assert snapshot(reopened) == before
        assert [where(t) for t in reopened.list(None, filter={"run_id": "run-2"})] == (
            filtered_before
        )
        assert writes_of(reopened.get_tuple(odd)) == _expected_writes()
        assert_populated_intact(reopened, populated)
        nxt = put(reopened, "a", parent=populated["r2"], versions={"a": v(2)}, new_versions={})
        assert values_at(reopened, nxt) == {"a": "a1"}


def test_using_a_closed_checkpointer_raises_storage_error(url: str) -> None:
    closed = open_checkpointer(url)
    config = put(closed, "t", values={"a": 1})
    closed.close()
    closed.close()  # idempotent

    with pytest.raises(StorageError):
        closed.get_tuple(cfg("t"))
    with pytest.raises(StorageError):
        list(closed.list(None))
    with pytest.raises(StorageError):
        put(closed, "t")
    with pytest.raises(StorageError):
        closed.put_writes(config, [("a", 1)], "task")
    with pytest.raises(StorageError):
        closed.delete_thread("t")
    with pytest.raises(StorageError):
        closed.delete_for_runs(["run"])
    with pytest.raises(StorageError):
        closed.copy_thread("t", "u")
    with pytest.raises(StorageError):
        closed.prune(["t"])
    with pytest.raises(StorageError, match="closed"), closed.claim_thread("t"):
        pass  # the SQLite and in-memory checkpointers used to grant it
    assert issubclass(StorageError, StatekeeperError)

    with open_checkpointer(url) as managed:
        put(managed, "t")
    with pytest.raises(StorageError):
        managed.get_tuple(cfg("t"))


async def test_using_a_closed_checkpointer_async_raises_storage_error(url: str) -> None:
    closed = open_checkpointer(url)
    config = await aput(closed, "t")
    closed.close()

    with pytest.raises(StorageError):
        await closed.aget_tuple(cfg("t"))
    with pytest.raises(StorageError):
        [t async for t in closed.alist(None)]
    with pytest.raises(StorageError):
        await aput(closed, "t")
    with pytest.raises(StorageError):
        await closed.aput_writes(config, [("a", 1)], "task")
    with pytest.raises(StorageError):
        await closed.adelete_thread("t")


# --------------------------------------------------------------------------------------------
# 16. get_delta_channel_history
# --------------------------------------------------------------------------------------------

DELTA_CHANNELS = ["msgs", "other", "falsy", "never"]


def _delta_chain(saver: Any) -> dict[str, RunnableConfig]:
    """c0 -> c1 -> c2 -> c3 -> {c4a, c4b}; c4b -> c5. "Empty" = a new version without a value.

    msgs:  seed at c0, empty at c1, seed at c2, empty at c3/c4a/c4b/c5
    other: value at c0 (version 1), empty new version at c2
    falsy: empty at c0, value None at c1, empty at c3
    never: never has a value; written at c1
    """
    v = version_maker(saver)
    c: dict[str, RunnableConfig] = {}
    c["c0"] = put(
        saver,
        "d",
        values={"msgs": ["seed-0"], "other": "o0"},
        versions={"msgs": v(1), "other": v(1), "falsy": v(1)},
    )
    saver.put_writes(c["c0"], [("msgs", "m0-z")], "t-z", "~p, z")
    saver.put_writes(c["c0"], [("msgs", "m0-a"), ("other", "o0-a")], "t-a", "~p, a")
    saver.put_writes(c["c0"], [("falsy", "f0")], "input", "")
    c["c1"] = put(
        saver,
        "d",
        parent=c["c0"],
        values={"falsy": None},
        versions={"msgs": v(2), "other": v(1), "falsy": v(2)},
        new_versions={"msgs": v(2), "falsy": v(2)},
    )
    saver.put_writes(c["c1"], [("msgs", "m1-b"), ("never", "n1")], "t-b", "~p, b")
    saver.put_writes(c["c1"], [("msgs", "m1-a")], "t-a", "~p, a")
    c["c2"] = put(
        saver,
        "d",
        parent=c["c1"],
        values={"msgs": ["snap-2"]},
        versions={"msgs": v(3), "other": v(2), "falsy": v(2)},
        new_versions={"msgs": v(3), "other": v(2)},
    )
    saver.put_writes(c["c2"], [("msgs", "m2-a"), ("other", "o2")], "t-a", "~p, a")
    c["c3"] = put(
        saver,
        "d",
        parent=c["c2"],
        versions={"msgs": v(4), "other": v(2), "falsy": v(3)},
        new_versions={"msgs": v(4), "falsy": v(3)},
    )
    saver.put_writes(c["c3"], [("falsy", "f3")], "t-f", "~p, f")
    saver.put_writes(c["c3"], [("msgs", "m3")], "t-a", "~p, a")
    c["c4a"] = put(
        saver,
        "d",
        parent=c["c3"],
        versions={"msgs": v(5), "other": v(2), "falsy": v(3)},
        new_versions={"msgs": v(5)},
    )
    saver.put_writes(c["c4a"], [("msgs", "m4a"), ("other", "o4a")], "t-a", "~p, a")
    c["c4b"] = put(
        saver,
        "d",
        parent=c["c3"],
        versions={"msgs": v(6), "other": v(2), "falsy": v(3)},
        new_versions={"msgs": v(6)},
    )
    saver.put_writes(c["c4b"], [("msgs", "m4b"), ("other", "o4b")], "t-b", "~p, b")
    c["c5"] = put(
        saver,
        "d",
        parent=c["c4b"],
        versions={"msgs": v(7), "other": v(2), "falsy": v(3)},
        new_versions={"msgs": v(7)},
    )
    saver.put_writes(c["c5"], [("msgs", "m5-own"), ("other", "o5-own")], "t-a", "~p, a")
    return c


def normalized(history: Any) -> Any:
    return strict(
        {
            ch: {
                "writes": [tuple(w) for w in entry["writes"]],
                **({"seed": entry["seed"]} if "seed" in entry else {}),
            }
            for ch, entry in history.items()
        }
    )


EXPECTED_HISTORY_C5 = {
    "msgs": {
        "writes": [("t-a", "msgs", "m2-a"), ("t-a", "msgs", "m3"), ("t-b", "msgs", "m4b")],
        "seed": ["snap-2"],
    },
    # c1 still points at other@1, whose value was stored by c0
    "other": {"writes": [("t-a", "other", "o2"), ("t-b", "other", "o4b")], "seed": "o0"},
    "falsy": {"writes": [("t-f", "falsy", "f3")], "seed": None},
    "never": {"writes": [("t-b", "never", "n1")]},
}
EXPECTED_HISTORY_C2 = {
    "msgs": {
        "writes": [
            ("t-a", "msgs", "m0-a"),
            ("t-z", "msgs", "m0-z"),
            ("t-a", "msgs", "m1-a"),
            ("t-b", "msgs", "m1-b"),
        ],
        "seed": ["seed-0"],
    },
    "other": {"writes": [], "seed": "o0"},
    "falsy": {"writes": [], "seed": None},
    "never": {"writes": [("t-b", "never", "n1")]},
}


def test_get_delta_channel_history_matches_the_base_class_walk(saver: Any) -> None:
    c = _delta_chain(saver)

    def both(config: RunnableConfig, channels: list[str]) -> tuple[Any, Any]:
        mine = saver.get_delta_channel_history(config=config, channels=channels)
        base = BaseCheckpointSaver.get_delta_channel_history(
            saver, config=config, channels=channels
        )
        return normalized(mine), normalized(base)

    for name, config in [*c.items(), ("latest", cfg("d")), ("unknown", cfg("d", "", new_id()))]:
        mine, base = both(config, DELTA_CHANNELS)
        assert mine == base, name
    assert both(c["c5"], DELTA_CHANNELS)[0] == normalized(EXPECTED_HISTORY_C5)
    assert both(cfg("d"), DELTA_CHANNELS)[0] == normalized(EXPECTED_HISTORY_C5)
    assert both(c["c2"], DELTA_CHANNELS)[0] == normalized(EXPECTED_HISTORY_C2)
    assert both(c["c5"], ["msgs"])[0] == normalized({"msgs": EXPECTED_HISTORY_C5["msgs"]})
    assert saver.get_delta_channel_history(config=c["c5"], channels=[]) == {}


async def test_aget_delta_channel_history_matches_the_base_class_walk(saver: Any) -> None:
    c = _delta_chain(saver)

    for name in ("c5", "c4a", "c2"):
        mine = await saver.aget_delta_channel_history(config=c[name], channels=DELTA_CHANNELS)
        base = await BaseCheckpointSaver.aget_delta_channel_history(
            saver, config=c[name], channels=DELTA_CHANNELS
        )
        assert normalized(mine) == normalized(base), name
    mine = await saver.aget_delta_channel_history(config=c["c5"], channels=DELTA_CHANNELS)
    assert normalized(mine) == normalized(EXPECTED_HISTORY_C5)


# --------------------------------------------------------------------------------------------
# thread safety
# --------------------------------------------------------------------------------------------


def test_concurrent_sync_calls_from_eight_threads_lose_and_corrupt_nothing(saver: Any) -> None:
    workers, rounds = 8, 20
    own_ids = [[new_id() for _ in range(rounds)] for _ in range(workers)]
    shared_ids = [[new_id() for _ in range(rounds)] for _ in range(workers)]
    barrier = threading.Barrier(workers)

    def value(k: int, i: int) -> dict[str, Any]:
        return {"k": k, "i": i, "text": f"{k}-{i}:" * 40, "raw": bytes([k, i])}

    def work(k: int) -> None:
        barrier.wait(timeout=60)
        parent = None
        for i in range(rounds):
            own = put(
                saver,
                f"worker-{k}",
                parent=parent,
                values={"v": value(k, i)},
                checkpoint_id=own_ids[k][i],
                metadata={**generate_metadata(step=i), "worker": k},
            )
            saver.put_writes(own, [("v", value(k, i)), ("i", i)], f"task-{k}-{i}", f"~p, {k}")
            got = saver.get_tuple(own)
            assert got is not None
            assert got.checkpoint["channel_values"] == {"v": value(k, i)}
            latest = list(saver.list(thread(f"worker-{k}"), limit=2))
            assert [t.checkpoint["id"] for t in latest] == own_ids[k][max(0, i - 1) : i + 1][::-1]
            shared = put(
                saver,
                "shared",
                values={"v": value(k, i)},
                checkpoint_id=shared_ids[k][i],
                metadata={**generate_metadata(step=i), "worker": k},
            )
            saver.put_writes(shared, [("i", i)], f"task-{k}")
            newest = [t.checkpoint["id"] for t in saver.list(None, limit=3)]
            assert 2 <= len(newest) <= 3  # at least this round's own and shared checkpoints
            assert newest == sorted(newest, reverse=True)
            parent = own

    with ThreadPoolExecutor(workers) as pool:
        for future in [pool.submit(work, k) for k in range(workers)]:
            future.result()

    for k in range(workers):
        listed = list(saver.list(thread(f"worker-{k}")))
        assert [t.checkpoint["id"] for t in listed] == own_ids[k][::-1]
        for i, tup in enumerate(reversed(listed)):
            assert strict(tup.checkpoint["channel_values"]) == strict({"v": value(k, i)})
            assert tup.metadata["worker"] == k
            assert tup.metadata["step"] == i
            expected_parent = own_ids[k][i - 1] if i else None
            assert (where_cfg(tup.parent_config)[2] if tup.parent_config else None) == (
                expected_parent
            )
            assert strict(writes_of(tup)) == strict(
                [(f"task-{k}-{i}", "v", value(k, i)), (f"task-{k}-{i}", "i", i)]
            )
    shared_listed = list(saver.list(thread("shared")))
    all_shared = sorted(itertools.chain.from_iterable(shared_ids), reverse=True)
    assert [t.checkpoint["id"] for t in shared_listed] == all_shared
    by_id = {i: (k, r) for k, ids in enumerate(shared_ids) for r, i in enumerate(ids)}
    for tup in shared_listed:
        k, i = by_id[tup.checkpoint["id"]]
        assert strict(tup.checkpoint["channel_values"]) == strict({"v": value(k, i)})
        assert writes_of(tup) == [(f"task-{k}", "i", i)]
    assert len(list(saver.list(None))) == 2 * workers * rounds


# -- LangGraph's DeltaChannel through a real graph ----------------------------------------


def _append(state: list[str], writes: list[list[str]]) -> list[str]:
    return state + [item for batch in writes for item in batch]


class _Log(TypedDict):
    log: Annotated[list[str], DeltaChannel(_append, snapshot_frequency=4)]


def _run_log(saver: Any, turns: int) -> tuple[Any, RunnableConfig]:
    def step(state: _Log) -> dict[str, Any]:
        return {"log": [f"step {len(state['log'])}"]}

    builder = StateGraph(_Log)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    graph = builder.compile(checkpointer=saver)
    config: RunnableConfig = {"configurable": {"thread_id": "log"}}
    for turn in range(turns):
        graph.invoke({"log": [f"input {turn}"]}, config)
    return graph, config


def test_delta_channels_rebuild_like_in_memory_and_survive_prune(saver: Any) -> None:
    reference, ref_config = _run_log(InMemorySaver(), 11)
    graph, config = _run_log(saver, 11)
    before = graph.get_state(config).values
    assert before == reference.get_state(ref_config).values
    ours = [s.values for s in graph.get_state_history(config)]
    assert ours == [s.values for s in reference.get_state_history(ref_config)]

    total = len(list(saver.list(config)))
    saver.prune(["log"], strategy="keep_latest")
    assert 1 < len(list(saver.list(config))) < total  # back to the last snapshot, no more
    assert graph.get_state(config).values == before
    graph.invoke({"log": ["after prune"]}, config)
    after = [*before["log"], "after prune", f"step {len(before['log']) + 1}"]
    assert graph.get_state(config).values["log"] == after


# --------------------------------------------------------------------------------------------
# 17. the write path: every check, on every backend
# --------------------------------------------------------------------------------------------
#
# ``Checkpointer`` checks every write the same way before a backend stores anything. Each
# check below is one case, run through the sync method and its async twin on every
# backend: it must raise exactly its error, and leave what was stored before untouched.

BAD = "a\ud800"  # a lone surrogate: not encodable as UTF-8, so no backend can store it


class WriteCheck(NamedTuple):
    method: str  # the sync method; the async twin is "a" + method
    arguments: Callable[[RunnableConfig], tuple[Any, ...]]  # the stored head -> arguments
    error: type[Exception]
    keywords: dict[str, Any]


def _put_call(
    config: RunnableConfig | None = None,
    *,
    checkpoint: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    values: dict[str, Any] | None = None,
    versions: dict[Any, Any] | None = None,
    new_versions: dict[Any, Any] | None = None,
) -> Callable[[RunnableConfig], tuple[Any, ...]]:
    """The arguments of a put of a child of the head of thread "a", valid but for what
    is given."""

    def arguments(head: RunnableConfig) -> tuple[Any, ...]:
        stored = generate_checkpoint(
            checkpoint_id=new_id(),
            channel_values={"a": "new"} if values is None else values,
            channel_versions={"a": 99} if versions is None else versions,
        )
        stored.update(checkpoint or {})  # type: ignore[typeddict-item]
        return (
            cfg("a", "", cp_id(head)) if config is None else config,
            stored,
            {**generate_metadata(step=9), **(metadata or {})},
            {"a": 99} if new_versions is None else new_versions,
        )

    return arguments


def _writes_call(
    config: RunnableConfig | None = None,
    *,
    writes: list[tuple[Any, Any]] | None = None,
    task_id: Any = "task-new",
    task_path: Any = "",
) -> Callable[[RunnableConfig], tuple[Any, ...]]:
    """The arguments of a put_writes to the head of thread "a", valid but for what is
    given."""

    def arguments(head: RunnableConfig) -> tuple[Any, ...]:
        return (
            head if config is None else config,
            [("a", "new write")] if writes is None else writes,
            task_id,
            task_path,
        )

    return arguments


def _given(*arguments: Any) -> Callable[[RunnableConfig], tuple[Any, ...]]:
    return lambda head: arguments


def _check(
    method: str,
    arguments: Callable[[RunnableConfig], tuple[Any, ...]],
    error: type[Exception],
    id: str,
    **keywords: Any,
) -> Any:
    return pytest.param(WriteCheck(method, arguments, error, keywords), id=id)


def _unnamed_config(head: RunnableConfig) -> RunnableConfig:
    return {"configurable": {"checkpoint_ns": "", "checkpoint_id": cp_id(head)}}


WRITE_PATH_CHECKS = [
    # put: the config
    _check("put", _put_call({}), ConfigurationError, "put-config-without-configurable"),
    _check(
        "put",
        _put_call({"configurable": {"checkpoint_ns": ""}}),
        ConfigurationError,
        "put-config-without-thread-id",
    ),
    _check("put", _put_call(cfg(BAD)), InvalidIdError, "put-thread-id-lone-surrogate"),
    _check("put", _put_call(cfg("")), InvalidIdError, "put-thread-id-empty"),
    _check(
        "put",
        _put_call({"configurable": {"thread_id": None}}),
        InvalidIdError,
        "put-thread-id-not-text",
    ),
    _check("put", _put_call(cfg("a", BAD)), InvalidIdError, "put-namespace-lone-surrogate"),
    _check("put", _put_call(cfg("a", "", BAD)), InvalidIdError, "put-parent-id-lone-surrogate"),
    _check("put", _put_call(cfg("a", "", b"id")), InvalidIdError, "put-parent-id-not-text"),
    # put: the checkpoint's id
    _check(
        "put", _put_call(checkpoint={"id": BAD}), InvalidIdError, "put-checkpoint-id-lone-surrogate"
    ),
    _check("put", _put_call(checkpoint={"id": ""}), InvalidIdError, "put-checkpoint-id-empty"),
    _check("put", _put_call(checkpoint={"id": None}), InvalidIdError, "put-checkpoint-id-not-text"),
    # put: the metadata, and the run id in it
    _check(
        "put", _put_call(metadata={"score": float("nan")}), SerializationError, "put-metadata-nan"
    ),
    _check(
        "put",
        _put_call(metadata={"when": datetime(2024, 1, 1, tzinfo=UTC)}),
        SerializationError,
        "put-metadata-not-json",
    ),
    _check("put", _put_call(metadata={"run_id": BAD}), InvalidIdError, "put-run-id-lone-surrogate"),
    _check(
        "put",
        _put_call(
            {"configurable": {"thread_id": "a", "checkpoint_ns": ""}, "metadata": {"run_id": BAD}}
        ),
        InvalidIdError,
        "put-run-id-from-the-config-lone-surrogate",
    ),
    # put: channel names and versions
    _check(
        "put",
        _put_call(versions={"a": 99, BAD: 1}),
        InvalidIdError,
        "put-channel-versions-name-lone-surrogate",
    ),
    _check(
        "put",
        _put_call(versions={"a": 99, None: 1}),
        InvalidIdError,
        "put-channel-versions-name-not-text",
    ),
    _check(
        "put",
        _put_call(values={BAD: 1}, new_versions={BAD: 99}),
        InvalidIdError,
        "put-new-versions-name-lone-surrogate",
    ),
    _check(
        "put",
        _put_call(versions={"a": float("nan")}),
        SerializationError,
        "put-channel-version-nan",
    ),
    _check(
        "put",
        _put_call(new_versions={"a": float("inf")}),
        SerializationError,
        "put-new-version-infinite",
    ),
    _check(
        "put",
        _put_call(versions={"a": object()}, new_versions={"a": object()}),
        SerializationError,
        "put-version-not-json",
    ),
    # put: what is serialised
    _check(
        "put",
        _put_call(checkpoint={"versions_seen": {"node": {"a": object()}}}),
        SerializationError,
        "put-checkpoint-not-serialisable",
    ),
    _check(
        "put", _put_call(values={"a": object()}), SerializationError, "put-value-not-serialisable"
    ),
    # put_writes: the config
    _check(
        "put_writes", _writes_call({}), ConfigurationError, "put-writes-config-without-configurable"
    ),
    _check(
        "put_writes",
        lambda head: _writes_call(_unnamed_config(head))(head),
        ConfigurationError,
        "put-writes-config-without-thread-id",
    ),
    _check(
        "put_writes",
        _writes_call(cfg("a")),
        ConfigurationError,
        "put-writes-config-without-checkpoint-id",
    ),
    _check(
        "put_writes",
        lambda head: _writes_call(cfg(BAD, "", cp_id(head)))(head),
        InvalidIdError,
        "put-writes-thread-id-lone-surrogate",
    ),
    _check(
        "put_writes",
        lambda head: _writes_call(cfg("a", BAD, cp_id(head)))(head),
        InvalidIdError,
        "put-writes-namespace-lone-surrogate",
    ),
    _check(
        "put_writes",
        _writes_call(cfg("a", "", BAD)),
        InvalidIdError,
        "put-writes-checkpoint-id-lone-surrogate",
    ),
    # put_writes: the task and the writes
    _check(
        "put_writes", _writes_call(task_id=BAD), InvalidIdError, "put-writes-task-id-lone-surrogate"
    ),
    _check("put_writes", _writes_call(task_id=None), InvalidIdError, "put-writes-task-id-not-text"),
    _check(
        "put_writes",
        _writes_call(task_path=BAD),
        InvalidIdError,
        "put-writes-task-path-lone-surrogate",
    ),
    _check(
        "put_writes", _writes_call(task_path=None), InvalidIdError, "put-writes-task-path-not-text"
    ),
    _check(
        "put_writes",
        _writes_call(writes=[("a", 1), (BAD, 2)]),
        InvalidIdError,
        "put-writes-channel-lone-surrogate",
    ),
    _check(
        "put_writes",
        _writes_call(writes=[("a", 1), (["a"], 2)]),
        InvalidIdError,
        "put-writes-channel-not-text",
    ),
    _check(
        "put_writes",
        _writes_call(writes=[("a", 1), ("b", object())]),
        SerializationError,
        "put-writes-value-not-serialisable",
    ),
    # deletes and copies: every id is checked before anything changes
    _check("delete_thread", _given(BAD), InvalidIdError, "delete-thread-lone-surrogate"),
    _check("delete_thread", _given(""), InvalidIdError, "delete-thread-empty"),
    _check("delete_thread", _given(None), InvalidIdError, "delete-thread-not-text"),
    _check(
        "delete_for_runs", _given(["run-1", BAD]), InvalidIdError, "delete-for-runs-lone-surrogate"
    ),
    _check("delete_for_runs", _given(["run-1", ""]), InvalidIdError, "delete-for-runs-empty"),
    _check("delete_for_runs", _given(["run-1", None]), InvalidIdError, "delete-for-runs-not-text"),
    _check("copy_thread", _given(BAD, "copy"), InvalidIdError, "copy-thread-source-lone-surrogate"),
    _check("copy_thread", _given("a", BAD), InvalidIdError, "copy-thread-target-lone-surrogate"),
    _check("copy_thread", _given("a", ""), InvalidIdError, "copy-thread-target-empty"),
    _check("prune", _given(["a", BAD]), InvalidIdError, "prune-keep-latest-lone-surrogate"),
    _check(
        "prune",
        _given(["a", BAD]),
        InvalidIdError,
        "prune-delete-lone-surrogate",
        strategy="delete",
    ),
    _check(
        "prune", _given(["a"]), ConfigurationError, "prune-unknown-strategy", strategy="keep_all"
    ),
]


def _write_path_state(saver: Any) -> RunnableConfig:
    """Thread "a" (run-1, two namespaces, writes everywhere); returns its root head."""
    return populate(saver, "a", version_maker(saver))["r2"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("check", WRITE_PATH_CHECKS)
def test_each_write_path_check_raises_its_exact_error_and_stores_nothing(
    saver: Any, check: WriteCheck
) -> None:
    head = _write_path_state(saver)
    before = snapshot(saver)

    with pytest.raises(check.error) as raised:
        getattr(saver, check.method)(*check.arguments(head), **check.keywords)

    assert type(raised.value) is check.error, repr(raised.value)
    assert snapshot(saver) == before


@pytest.mark.parametrize("check", WRITE_PATH_CHECKS)
async def test_each_async_write_path_check_raises_its_exact_error_and_stores_nothing(
    saver: Any, check: WriteCheck
) -> None:
    head = _write_path_state(saver)
    before = snapshot(saver)

    with pytest.raises(check.error) as raised:
        await getattr(saver, "a" + check.method)(*check.arguments(head), **check.keywords)

    assert type(raised.value) is check.error, repr(raised.value)
    assert snapshot(saver) == before

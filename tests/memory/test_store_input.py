"""Hostile input to the memory store: every backend refuses the same bad input the same
way (statekeeper's errors or LangGraph's InvalidNamespaceError, in one line) before
anything is written, and stores everything up to the documented limits
(``statekeeper.memory.store.checks``, ``docs/memory-store.md``)."""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from langgraph.store.base import GetOp, InvalidNamespaceError, PutOp, SearchOp

from statekeeper.errors import ConfigurationError, InvalidIdError, SerializationError
from statekeeper.memory.store import MemoryStore, open_store
from statekeeper.memory.store.checks import MAX_DEPTH, MAX_ID_BYTES, MAX_LABELS, MAX_TTL_MINUTES

NS = ("docs", "u1")


def refused(error: type[Exception], call: Callable[[], Any]) -> str:
    """``call()`` raises ``error`` with a one-line message; return the message."""
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    assert "\n" not in message, message
    return message


def nothing_stored(store: MemoryStore) -> None:
    assert store.list_namespaces() == []
    assert store.search(()) == []


# -- namespaces and keys of the wrong type --------------------------------------------------


def test_a_string_namespace_is_refused_not_split_into_characters(
    matrix_store: MemoryStore,
) -> None:
    message = refused(InvalidNamespaceError, lambda: matrix_store.put("users", "k", {"a": 1}))  # type: ignore[arg-type]
    assert "('users',)" in message
    refused(InvalidNamespaceError, lambda: matrix_store.batch([PutOp("users", "k", {"a": 1})]))  # type: ignore[arg-type]
    nothing_stored(matrix_store)
    matrix_store.put(("u", "s", "e", "r", "s"), "k", {"a": 1})
    refused(InvalidNamespaceError, lambda: matrix_store.delete("users", "k"))  # type: ignore[arg-type]
    refused(InvalidNamespaceError, lambda: matrix_store.get("users", "k"))  # type: ignore[arg-type]
    refused(InvalidNamespaceError, lambda: matrix_store.search("users"))  # type: ignore[arg-type]
    refused(InvalidNamespaceError, lambda: matrix_store.list_namespaces(prefix="users"))  # type: ignore[arg-type]
    refused(InvalidNamespaceError, lambda: matrix_store.list_namespaces(suffix="users"))  # type: ignore[arg-type]
    refused(InvalidNamespaceError, lambda: matrix_store.put(5, "k", {"a": 1}))  # type: ignore[arg-type]
    refused(InvalidNamespaceError, lambda: matrix_store.search(None))  # type: ignore[arg-type]
    assert matrix_store.get(("u", "s", "e", "r", "s"), "k") is not None  # still there


def test_a_list_namespace_is_read_as_a_tuple_on_every_backend(
    matrix_store: MemoryStore,
) -> None:
    matrix_store.put(["docs", "u1"], "k", {"text": "alpha"})  # type: ignore[arg-type]
    item = matrix_store.get(["docs", "u1"], "k")  # type: ignore[arg-type]
    assert item is not None
    assert item.namespace == NS
    assert type(item.namespace) is tuple
    assert [i.namespace for i in matrix_store.search(["docs"])] == [NS]  # type: ignore[arg-type]
    assert matrix_store.list_namespaces(prefix=["docs"]) == [NS]
    assert matrix_store.batch([GetOp(["docs", "u1"], "k")])[0].namespace == NS  # type: ignore[arg-type, union-attr]
    matrix_store.delete(["docs", "u1"], "k")  # type: ignore[arg-type]
    assert matrix_store.get(NS, "k") is None


@pytest.mark.parametrize("key", [None, 1, 1.5, b"k", ("k",)], ids=repr)
def test_keys_that_are_not_strings_are_refused_not_converted(
    matrix_store: MemoryStore, key: Any
) -> None:
    refused(InvalidIdError, lambda: matrix_store.put(NS, key, {"a": 1}))
    refused(InvalidIdError, lambda: matrix_store.batch([PutOp(NS, key, {"a": 1})]))
    nothing_stored(matrix_store)
    matrix_store.put(NS, str(key), {"a": 1})
    refused(InvalidIdError, lambda: matrix_store.get(NS, key))
    refused(InvalidIdError, lambda: matrix_store.delete(NS, key))
    assert matrix_store.get(NS, str(key)) is not None


def test_a_lone_surrogate_in_a_label_is_an_invalid_id_like_in_a_key(
    matrix_store: MemoryStore,
) -> None:
    refused(InvalidIdError, lambda: matrix_store.put(("a\ud800",), "k", {"a": 1}))
    refused(InvalidIdError, lambda: matrix_store.put(("a",), "k\udfff", {"a": 1}))
    refused(InvalidIdError, lambda: matrix_store.get(("a\ud800",), "k"))
    refused(InvalidIdError, lambda: matrix_store.search(("a\ud800",)))
    refused(InvalidIdError, lambda: matrix_store.list_namespaces(prefix=("a\ud800",)))
    nothing_stored(matrix_store)


async def test_the_async_api_checks_the_same(matrix_store: MemoryStore) -> None:
    with pytest.raises(InvalidNamespaceError):
        await matrix_store.aput("users", "k", {"a": 1})  # type: ignore[arg-type]
    with pytest.raises(InvalidIdError):
        await matrix_store.aput(NS, None, {"a": 1})  # type: ignore[arg-type]
    with pytest.raises(InvalidIdError):
        await matrix_store.aget(NS, None)  # type: ignore[arg-type]
    with pytest.raises(InvalidNamespaceError):
        await matrix_store.adelete("users", "k")  # type: ignore[arg-type]
    with pytest.raises(InvalidNamespaceError):
        await matrix_store.asearch("users")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        await matrix_store.alist_namespaces(max_depth="1")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        await matrix_store.abatch(5)  # type: ignore[arg-type]
    assert await asyncio.to_thread(matrix_store.list_namespaces) == []


# -- values, filters, pages, batches ------------------------------------------------------------


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def test_values_nested_too_deep_are_a_serialization_error(matrix_store: MemoryStore) -> None:
    for depth in (MAX_DEPTH + 1, 100_000):
        message = refused(SerializationError, lambda d=depth: matrix_store.put(NS, "k", nested(d)))  # type: ignore[misc]
        assert str(MAX_DEPTH) in message
    looped: dict[str, Any] = {"a": []}
    looped["a"].append(looped)
    refused(SerializationError, lambda: matrix_store.put(NS, "k", looped))
    nothing_stored(matrix_store)
    matrix_store.put(NS, "k", nested(MAX_DEPTH))
    assert matrix_store.get(NS, "k").value == nested(MAX_DEPTH)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "conditions",
    [{1: 1}, {"a": {1: 2}}, {"a": {"b": {None: 1}}}, nested(MAX_DEPTH + 1), nested(100_000)],
    ids=["int-key", "nested-int-key", "deep-none-key", "too-deep", "far-too-deep"],
)
def test_bad_filters_are_configuration_errors(
    matrix_store: MemoryStore, conditions: dict[Any, Any]
) -> None:
    matrix_store.put(NS, "k", {"a": {"b": 1}, "text": "alpha"})
    refused(ConfigurationError, lambda: matrix_store.search(NS, filter=conditions))
    refused(ConfigurationError, lambda: matrix_store.search(NS, query="alpha", filter=conditions))


@pytest.mark.parametrize("bad", [-1, True, "1", 1.0, None], ids=repr)
def test_pages_are_whole_numbers_of_at_least_zero(matrix_store: MemoryStore, bad: Any) -> None:
    refused(ConfigurationError, lambda: matrix_store.search(NS, limit=bad))
    refused(ConfigurationError, lambda: matrix_store.search(NS, offset=bad))
    refused(ConfigurationError, lambda: matrix_store.list_namespaces(limit=bad))
    refused(ConfigurationError, lambda: matrix_store.list_namespaces(offset=bad))


@pytest.mark.parametrize("bad", ["1", 0, -1, True, 1.5], ids=repr)
def test_max_depth_is_a_positive_whole_number(matrix_store: MemoryStore, bad: Any) -> None:
    matrix_store.put(NS, "k", {"a": 1})
    refused(ConfigurationError, lambda: matrix_store.list_namespaces(max_depth=bad))
    assert matrix_store.list_namespaces(max_depth=1) == [("docs",)]


@pytest.mark.parametrize(
    "ops",
    [5, None, "GetOp", b"ops", {"op": GetOp(NS, "k")}, [5], [GetOp(NS, "k"), "op"]],
    ids=["int", "none", "str", "bytes", "mapping", "list-of-int", "list-with-str"],
)
def test_a_batch_is_an_iterable_of_operations(matrix_store: MemoryStore, ops: Any) -> None:
    refused(ConfigurationError, lambda: matrix_store.batch(ops))
    refused(
        ConfigurationError,
        lambda: matrix_store.batch(
            [PutOp(NS, "k", {"a": 1}), *([ops] if not isinstance(ops, list) else ops)]
        ),
    )
    nothing_stored(matrix_store)
    assert matrix_store.batch(op for op in [GetOp(NS, "k")]) == [None]  # any iterable


def test_bad_operation_arguments_are_configuration_errors(matrix_store: MemoryStore) -> None:
    refused(ConfigurationError, lambda: matrix_store.put(NS, "k", {"a": 1}, index=True))  # type: ignore[arg-type]
    refused(ConfigurationError, lambda: matrix_store.put(NS, "k", {"a": 1}, index="text"))  # type: ignore[arg-type]
    refused(ConfigurationError, lambda: matrix_store.get(NS, "k", refresh_ttl="yes"))  # type: ignore[arg-type]
    refused(ConfigurationError, lambda: matrix_store.batch([SearchOp(NS, refresh_ttl=1)]))  # type: ignore[arg-type]
    nothing_stored(matrix_store)


# -- TTLs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ttl",
    [True, False, 0, -1, math.nan, math.inf, 1e300, MAX_TTL_MINUTES + 1, "5", [5]],
    ids=repr,
)
def test_ttl_is_one_rule_on_every_backend(store: MemoryStore, ttl: Any) -> None:
    message = refused(ConfigurationError, lambda: store.put(NS, "k", {"a": 1}, ttl=ttl))
    assert f"{MAX_TTL_MINUTES:,}" in message
    nothing_stored(store)


def test_the_longest_and_shortest_ttls_are_stored_on_every_backend(store: MemoryStore) -> None:
    store.put(NS, "long", {"a": 1}, ttl=MAX_TTL_MINUTES)
    store.put(NS, "int", {"a": 1}, ttl=1)
    store.put(NS, "tiny", {"a": 1}, ttl=1e-300)  # expired at once, still a valid ttl
    assert store.get(NS, "long") is not None
    assert store.get(NS, "int") is not None
    assert store.get(NS, "tiny") is None


# -- sizes ------------------------------------------------------------------------------------


def incompressible(size: int, seed: int) -> str:
    """About ``size`` bytes of UTF-8 that no compression shrinks (3-byte CJK), no '.'."""
    rng = random.Random(seed)
    text = "".join(chr(rng.randrange(0x4E00, 0x9FFF)) for _ in range(size // 3))
    return text + "x" * (size - len(text.encode("utf-8")))


def test_keys_and_namespaces_at_the_limits_are_stored_on_every_backend(
    store: MemoryStore,
) -> None:
    labels = tuple(f"l{i}" for i in range(MAX_LABELS))
    store.put(labels, "deep", {"text": "deep"})
    assert store.get(labels, "deep") is not None
    # the largest namespace and key together (PostgreSQL indexes them as one row)
    label_size = (MAX_ID_BYTES - (4 - 1)) // 4
    wide = tuple(incompressible(label_size, seed) for seed in range(4))
    key = incompressible(MAX_ID_BYTES, 9)
    assert len(".".join(wide).encode("utf-8")) <= MAX_ID_BYTES
    store.put(wide, key, {"text": "wide"})
    assert store.get(wide, key).value == {"text": "wide"}  # type: ignore[union-attr]
    nul_key = "\x00\x01" * (MAX_ID_BYTES // 4)  # NUL and U+0001 count two bytes each
    store.put(wide, nul_key, {"text": "nul"})
    assert {i.key for i in store.search(wide[:1])} == {key, nul_key}
    assert wide in store.list_namespaces(prefix=wide[:2])


def test_keys_and_namespaces_beyond_the_limits_are_invalid_ids(
    matrix_store: MemoryStore,
) -> None:
    too_deep = tuple(f"l{i}" for i in range(MAX_LABELS + 1))
    message = refused(InvalidIdError, lambda: matrix_store.put(too_deep, "k", {"a": 1}))
    assert str(MAX_LABELS) in message
    refused(
        InvalidIdError, lambda: matrix_store.put(tuple(f"l{i}" for i in range(1000)), "k", {"a": 1})
    )
    for ns, key in [
        (("x" * (MAX_ID_BYTES + 1),), "k"),
        (("a" * 600, "b" * 600), "k"),
        (NS, "k" * (MAX_ID_BYTES + 1)),
        (NS, "é" * (MAX_ID_BYTES // 2 + 1)),
        (NS, "\x00" * (MAX_ID_BYTES // 2 + 1)),
    ]:
        message = refused(InvalidIdError, lambda n=ns, k=key: matrix_store.put(n, k, {"a": 1}))  # type: ignore[misc]
        assert str(MAX_ID_BYTES) in message
        assert len(message) < 300
    refused(InvalidIdError, lambda: matrix_store.get(too_deep, "k"))
    refused(InvalidIdError, lambda: matrix_store.search(too_deep))
    nothing_stored(matrix_store)


# -- the store's options --------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"ttl": -1},
        {"ttl": 0},
        {"ttl": math.nan},
        {"ttl": "60"},
        {"ttl": {"default_ttl": True}},
        {"ttl": {"default_ttl": 1e300}},
        {"ttl": {"default_ttl": -5}},
        {"ttl": {"refresh_on_read": "no"}},
        {"ttl": {"colour": 1}},
        {"semantic_weight": "x"},
        {"semantic_weight": True},
        {"semantic_weight": math.nan},
        {"semantic_weight": 2},
        {"index": 5},
        {"index": {"fields": "text"}},
    ],
    ids=repr,
)
def test_bad_keyword_options_are_configuration_errors(
    store_url: str, options: dict[str, Any]
) -> None:
    refused(ConfigurationError, lambda: open_store(store_url, **options))


# stands for the test's own key prefix: another would leave keys behind on the server
OWN_PREFIX = object()
# per backend: (option, a good keyword value, a bad one), as its URL would be refused
BACKEND_OPTIONS = {
    "memory": [("busy_timeout", 5, "5"), ("busy_timeout", 5, True), ("mode", "rw", 1)],
    "sqlite": [("busy_timeout", 5.0, math.nan), ("mode", "rw", b"rw")],
    "file": [("lock_timeout", 5, "x"), ("fsync", False, "yes"), ("fsync", True, 1)],
    "redis": [("retries", 2, "3"), ("socket_timeout", 5, True), ("prefix", OWN_PREFIX, 5)],
    "redis-cluster": [("retries", 2, 2.0)],
    "postgres": [("pool_min_size", 1, "1"), ("pool_timeout", 5, math.inf)],
}


def test_backend_keyword_options_are_checked_like_url_options(
    store_backend: Any, store_url: str
) -> None:
    own_prefix = parse_qs(urlsplit(store_url).query).get("prefix", [""])[0]
    for name, given, bad in BACKEND_OPTIONS[store_backend.name]:
        good = own_prefix if given is OWN_PREFIX else given
        open_store(store_url, **{name: good}).close()
        message = refused(ConfigurationError, lambda n=name, b=bad: open_store(store_url, **{n: b}))  # type: ignore[misc]
        assert name in message


def test_good_keyword_options_are_taken(store_url: str) -> None:
    ttl = {"default_ttl": 5, "refresh_on_read": False}
    with open_store(store_url, ttl=ttl, semantic_weight=1) as opened:  # type: ignore[arg-type]
        assert opened.semantic_weight == 1.0
        assert opened.ttl_config == ttl

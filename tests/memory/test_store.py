"""The memory store's ``BaseStore`` contract, run against every entry of ``STORE_BACKENDS``
(``tests/memory/conftest.py``; matrices of filter, validation and query cases against
``MATRIX_BACKENDS``): LangGraph's semantics (put, get, delete, search with filters,
list_namespaces, TTL, validation) plus what statekeeper adds (relevance scores that never
pad and are the same on every backend, exact storage of hostile text, persistence,
thread safety)."""

from __future__ import annotations

import asyncio
import json
import math
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langchain_core.embeddings import Embeddings
from langgraph.graph import START, StateGraph
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    PutOp,
    SearchOp,
)

from statekeeper.errors import ConfigurationError, InvalidIdError, SerializationError, StorageError
from statekeeper.memory.store import MemoryStore, known_store_schemes, open_store
from statekeeper.memory.store import base as _store_base
from tests.memory.conftest import ANA, QUERIES, Backend, put_corpus

NS = ("docs", "u1")


def keys(items: Sequence[Any]) -> list[str]:
    return [item.key for item in items]


# -- put, get, delete --------------------------------------------------------------------


def test_put_get_round_trips_json_exactly(store: MemoryStore) -> None:
    value = {
        "text": "héllo \U0001f600 \u202e",
        "n": 2**70,
        "f": 0.1,
        "flag": True,
        "one": 1,
        "none": None,
        "nested": {"list": [1, "2", [3.5, False]], "empty": {}},
    }
    store.put(NS, "k", value)
    item = store.get(NS, "k")
    assert item is not None
    assert item.value == value
    assert type(item.value["flag"]) is bool
    assert type(item.value["one"]) is int
    assert (item.namespace, item.key) == (NS, "k")
    assert item.created_at.tzinfo is not None
    assert store.get(NS, "missing") is None
    assert store.get(("docs",), "k") is None  # a namespace is exact for get


def test_returned_values_are_copies(store: MemoryStore) -> None:
    store.put(NS, "k", {"a": [1]})
    item = store.get(NS, "k")
    assert item is not None
    item.value["a"].append(2)
    assert store.get(NS, "k").value == {"a": [1]}  # type: ignore[union-attr]


def test_update_keeps_created_at_and_moves_updated_at(store: MemoryStore) -> None:
    store.put(NS, "k", {"v": 1})
    first = store.get(NS, "k")
    store.put(NS, "k", {"v": 2})
    second = store.get(NS, "k")
    assert first is not None
    assert second is not None
    assert second.value == {"v": 2}
    assert second.created_at == first.created_at
    assert second.updated_at >= first.updated_at


def test_put_none_and_delete_remove_the_item(store: MemoryStore) -> None:
    store.put(NS, "a", {"text": "alpha"})
    store.put(NS, "b", {"text": "beta"})
    store.delete(NS, "a")
    store.batch([PutOp(NS, "b", None)])
    assert store.get(NS, "a") is None
    assert store.get(NS, "b") is None
    assert store.search(NS) == []
    assert store.search(NS, query="alpha") == []
    store.delete(NS, "never-there")  # deleting nothing is fine


@pytest.mark.parametrize(
    "value",
    [{"t": (1, 2)}, {"t": float("nan")}, {"t": {1: "x"}}, {"t": {1, 2}}, {"t": b"x"}],
    ids=["tuple", "nan", "int-key", "set", "bytes"],
)
def test_values_that_would_not_come_back_equal_are_refused(
    matrix_store: MemoryStore, value: dict[str, Any]
) -> None:
    with pytest.raises(SerializationError):
        matrix_store.put(NS, "k", value)
    assert matrix_store.get(NS, "k") is None


def test_batch_runs_in_order_and_a_failed_batch_writes_nothing(store: MemoryStore) -> None:
    got = store.batch([PutOp(NS, "k", {"v": 1}), GetOp(NS, "k"), PutOp(NS, "k", {"v": 2})])
    assert got[1] is not None
    assert got[1].value == {"v": 1}
    with pytest.raises(SerializationError):
        store.batch([PutOp(NS, "x", {"v": 1}), PutOp(NS, "y", {"v": (1,)})])
    assert store.get(NS, "x") is None
    assert store.get(NS, "k").value == {"v": 2}  # type: ignore[union-attr]


# -- namespaces and hostile text ---------------------------------------------------------


@pytest.mark.parametrize(
    "namespace",
    [(), ("langgraph", "x"), ("a.b",), ("",), ("a", 1), ("nul\x00",)],
    ids=["empty", "langgraph-root", "period", "empty-label", "not-str", "nul"],
)
def test_invalid_namespaces_are_refused(matrix_store: MemoryStore, namespace: Any) -> None:
    with pytest.raises(InvalidNamespaceError):
        matrix_store.put(namespace, "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):  # also when the op skips BaseStore.put
        matrix_store.batch([PutOp(namespace, "k", {"v": 1})])


HOSTILE = [
    "it's",
    'say "hi"',
    "100%",
    "_",
    "a_b%c",
    "'; DROP TABLE memory_items; --",
    "x' OR '1'='1",
    "*",
    "[abc]",
    "?",
    "ünï \U0001f600 עברית",
    "a/b\\c",
    " spaced ",
]


@pytest.mark.parametrize("label", HOSTILE)
def test_hostile_namespaces_and_keys_are_stored_and_scoped_exactly(
    store: MemoryStore, label: str
) -> None:
    store.put((label,), label, {"text": "inside"})
    store.put((label, "child"), "k", {"text": "child"})
    store.put(("other",), label, {"text": "outside"})
    store.put((label + "x",), "k", {"text": "sibling"})  # a longer label, not a child
    assert store.get((label,), label).value == {"text": "inside"}  # type: ignore[union-attr]
    found = store.search((label,))
    assert sorted((i.namespace, i.key) for i in found) == sorted(
        [((label,), label), ((label, "child"), "k")]
    )
    listed = store.list_namespaces(prefix=(label,))
    if label == "*":  # in a list_namespaces path "*" is LangGraph's one-label wildcard
        assert listed == sorted([("*",), ("*", "child"), ("*x",), ("other",)])
    else:
        assert listed == [(label,), (label, "child")]


@pytest.mark.parametrize("key", ["a\x00b", "a\x00c", "", "\x00", "line\nbreak"])
def test_keys_with_nul_and_empty_keys_are_distinct(matrix_store: MemoryStore, key: str) -> None:
    matrix_store.put(NS, key, {"key": key})
    matrix_store.put(NS, key + "\x00", {"key": key + "\x00"})
    assert matrix_store.get(NS, key).value == {"key": key}  # type: ignore[union-attr]
    assert matrix_store.get(NS, key + "\x00").value == {"key": key + "\x00"}  # type: ignore[union-attr]


def test_keys_that_are_not_unicode_text_are_refused(store: MemoryStore) -> None:
    with pytest.raises(InvalidIdError):
        store.put(NS, "lone \ud800 surrogate", {"v": 1})


@pytest.mark.parametrize("key", [*HOSTILE, "a.b", "$eq", "a\x00b"])
def test_hostile_filter_keys_match_exactly(matrix_store: MemoryStore, key: str) -> None:
    matrix_store.put(NS, "yes", {key: "v", "other": 1})
    matrix_store.put(NS, "no", {key + "x": "v", "other": 1})
    assert keys(matrix_store.search(NS, filter={key: "v"})) == ["yes"]
    assert keys(matrix_store.search(NS, query="v", filter={key: "v"})) == []  # "v" is no term


# -- search without a query --------------------------------------------------------------


def test_search_lists_newest_first_under_the_prefix(store: MemoryStore) -> None:
    for i in range(5):
        store.put(("docs", f"u{i % 2}"), f"k{i}", {"i": i})
    store.put(("docsx",), "not-under", {"i": -1})
    assert keys(store.search(("docs",))) == ["k4", "k3", "k2", "k1", "k0"]
    assert keys(store.search(("docs",), limit=2, offset=1)) == ["k3", "k2"]
    assert keys(store.search(("docs", "u1"))) == ["k3", "k1"]
    assert len(store.search(())) == 6
    assert all(item.score is None for item in store.search(("docs",)))
    assert store.search(("docs",), limit=0) == []
    with pytest.raises(ConfigurationError):
        store.search(("docs",), limit=-1)


FILTER_CASES: list[tuple[dict[str, Any], list[str]]] = [
    ({"color": "red"}, ["a"]),
    ({"n": 1}, ["a"]),  # 1 is not True
    ({"flag": True}, ["b"]),
    ({"missing": None}, ["a", "b", "c"]),
    ({"n": {"$gt": 1}}, ["c"]),
    ({"n": {"$gte": 1, "$lt": 3}}, ["a"]),  # True is not a number
    ({"n": {"$ne": 1}}, ["b", "c"]),
    ({"n": {"$eq": 5}}, ["c"]),
    ({"when": {"$lte": "2024-02"}}, ["a", "b"]),  # strings compare with strings
    ({"when": {"$gt": 3}}, []),  # a string never orders against a number
    ({"meta": {"owner": "ana"}}, ["a", "c"]),  # a mapping matches the fields it names
    ({"meta.owner": "ana"}, ["a", "c"]),  # a dotted key is a path when no field has it
    ({"meta": {"owner": "ana", "level": {"$gt": 1}}}, ["c"]),
    ({"tags": ["x", "y"]}, ["a"]),
    ({"tags": ["x"]}, []),
]


@pytest.mark.parametrize(("conditions", "expected"), FILTER_CASES)
def test_filters(
    matrix_store: MemoryStore, conditions: dict[str, Any], expected: list[str]
) -> None:
    matrix_store.put(NS, "c", {"color": "blue", "n": 5, "meta": {"owner": "ana", "level": 2}})
    matrix_store.put(NS, "b", {"color": "blue", "n": True, "flag": True, "when": "2024-01-31"})
    matrix_store.put(NS, "a", {"color": "red", "n": 1, "when": "2024-01-02", "tags": ["x", "y"]})
    matrix_store.put(NS, "a-meta", {"meta": {"owner": "bob"}}, index=False)
    matrix_store.delete(NS, "a-meta")
    matrix_store.put(NS, "a", {**matrix_store.get(NS, "a").value, "meta": {"owner": "ana"}})  # type: ignore[union-attr]
    assert sorted(keys(matrix_store.search(NS, filter=conditions))) == expected


def test_unknown_filter_operators_are_refused(store: MemoryStore) -> None:
    with pytest.raises(ConfigurationError, match=r"\$in"):
        store.search(NS, filter={"n": {"$in": [1]}})


# -- list_namespaces ---------------------------------------------------------------------


def test_list_namespaces(store: MemoryStore) -> None:
    for ns in [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f")]:
        store.put(ns, "k", {"v": 1})
    store.put(("a", "c", "f"), "k", {"v": 1})
    assert store.list_namespaces(prefix=("a", "b"), max_depth=3) == [
        ("a", "b", "c"),
        ("a", "b", "d"),
        ("a", "b", "f"),
    ]
    assert store.list_namespaces(suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(prefix=("a", "*", "f")) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(max_depth=1) == [("a",)]
    assert store.list_namespaces(limit=2, offset=1) == [("a", "b", "d", "e"), ("a", "b", "d", "i")]
    store.delete(("a", "c", "f"), "k")
    assert ("a", "c", "f") not in store.list_namespaces()


# -- query search: relevance -------------------------------------------------------------


def test_query_scores_are_normalised_and_never_pad(store_either: MemoryStore) -> None:
    store = store_either
    store.put(NS, "mode", {"text": "Ana prefers dark mode in every editor"})
    store.put(NS, "dog", {"text": "Ana adopted a beagle called Biscuit"})
    store.put(NS, "deploy", {"text": "Deploys happen on Tuesdays"})
    full = store.search(NS, query="dark mode")
    assert keys(full) == ["mode"]
    assert full[0].score == pytest.approx(1.0)
    partial = store.search(NS, query="dark theme settings")
    assert keys(partial) == ["mode"]
    assert 0.0 < partial[0].score < 1.0
    assert store.search(NS, query="quantum entanglement") == []  # nothing related: nothing
    assert store.search(NS, query="what is it?") == []  # only stopwords: nothing
    assert store.search(NS, query="   ") == []
    assert len(store.search(NS, query="")) == 3  # no query: a listing, as in LangGraph
    ranked = store.search(NS, query="Biscuit deploys on Tuesdays")
    assert keys(ranked) == ["deploy", "dog"]
    assert ranked[0].score > ranked[1].score  # type: ignore[operator]


def test_query_search_honours_filter_limit_and_offset(store_either: MemoryStore) -> None:
    store = store_either
    for i in range(6):
        store.put(NS, f"k{i}", {"text": "dark mode" + " editor" * (i % 2), "i": i})
    store.put(NS, "light", {"text": "light mode", "i": 9})
    found = store.search(NS, query="dark mode editor", filter={"i": {"$lt": 9}})
    assert len(found) == 6
    assert all(item.key != "light" for item in found)
    assert [item.score for item in found] == sorted((i.score for i in found), reverse=True)
    assert keys(store.search(NS, query="dark mode editor", limit=2, offset=1)) == keys(found)[1:3]


def test_equal_scores_keep_bm25_order_then_newest_first(store: MemoryStore) -> None:
    store.put(NS, "long", {"text": "dark " + "filler words " * 6})
    store.put(NS, "short", {"text": "dark"})
    store.put(NS, "short-newer", {"text": "dark"})
    store.put(("docsx",), "elsewhere", {"text": "dark dark dark"})  # not under the prefix
    found = store.search(NS, query="dark")
    assert [item.score for item in found] == [1.0, 1.0, 1.0]
    assert keys(found) == ["short-newer", "short", "long"]


def test_every_backend_ranks_the_labelled_corpus_as_sqlite_does(store: MemoryStore) -> None:
    with open_store("memory://") as reference:
        put_corpus(reference)
        put_corpus(store)
        for question, _ in QUERIES:
            ours = store.search(ANA, query=question, limit=40)
            theirs = reference.search(ANA, query=question, limit=40)
            assert [(i.key, round(i.score, 12)) for i in ours] == [  # type: ignore[arg-type]
                (i.key, round(i.score, 12))  # type: ignore[arg-type]
                for i in theirs
            ], question


FTS_SYNTAX = [
    'dark "mode',
    "dark* mode",
    "NEAR(dark mode)",
    "dark AND mode",
    "dark OR mode",
    "dark NOT mode",
    "-dark mode",
    "text: dark mode",
    "dark + mode ^ {x} (y)",
    "'; DROP TABLE memory_terms; --",
]


@pytest.mark.parametrize("query", FTS_SYNTAX)
def test_fts_syntax_in_queries_is_just_words(matrix_store: MemoryStore, query: str) -> None:
    matrix_store.put(NS, "mode", {"text": "dark mode everywhere"})
    matrix_store.put(NS, "near", {"text": "near the river"})
    matrix_store.put(NS, "and", {"text": "and or not"})
    plain = re.sub(r"[^\w\s]", " ", query).lower()
    got = matrix_store.search(NS, query=query)
    assert [(i.key, i.score) for i in got] == [
        (i.key, i.score) for i in matrix_store.search(NS, query=plain)
    ]


def test_index_fields_choose_the_searchable_text() -> None:
    with open_store("memory://", index={"fields": ["title"]}) as store:
        store.put(NS, "a", {"title": "Kubernetes upgrade", "body": "postgres"})
        assert keys(store.search(NS, query="kubernetes")) == ["a"]
        assert store.search(NS, query="postgres") == []
        store.put(NS, "b", {"title": "x", "body": "postgres"}, index=["body"])
        assert keys(store.search(NS, query="postgres")) == ["b"]
        store.put(NS, "c", {"title": "Kubernetes"}, index=False)  # listed, never matched
        assert keys(store.search(NS, query="kubernetes")) == ["a"]
        assert "c" in keys(store.search(NS))


def test_a_note_is_searched_by_its_text_and_topics_not_its_provenance(
    store_either: MemoryStore,
) -> None:
    store = store_either
    from tests.memory.conftest import make_note

    note = make_note("Ana adopted a beagle", topics=("Biscuit",), thread_id="kubernetes")
    store.put(NS, note.key, note.to_value())
    assert keys(store.search(NS, query="biscuit")) == [note.key]
    assert store.search(NS, query="kubernetes") == []  # the thread id is not its content
    assert store.search(NS, query="statekeeper note") == []  # nor is its kind


# -- embeddings --------------------------------------------------------------------------


class ConceptEmbeddings(Embeddings):
    """Deterministic embeddings in which synonyms share a dimension: "dog", "beagle" and
    "puppy" are one concept, as a real model would place them close together."""

    CONCEPTS = [
        {"dog", "dogs", "beagle", "puppy", "pet"},
        {"car", "vehicle", "honda", "civic"},
        {"headache", "headaches", "migraine", "migraines"},
        {"food", "eat", "cilantro", "vegetarian"},
    ]

    def __init__(self) -> None:
        self.calls = 0

    def _embed(self, text: str) -> list[float]:
        words = set(re.findall(r"\w+", text.lower()))
        vector = [float(len(words & concept)) for concept in self.CONCEPTS]
        return [*vector, 0.1]  # a small shared component, as real embeddings have

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        return [self._embed(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._embed(text)


def test_embeddings_find_paraphrases_that_lexical_search_misses(
    store_backend: Backend, store_url: str
) -> None:
    url = store_url
    docs = {
        "dog": "Ana adopted a beagle puppy called Biscuit",
        "car": "The Honda failed its inspection",
        "pain": "Ana gets migraines after short nights",
    }
    with open_store("memory://") as lexical:
        for key, text in docs.items():
            lexical.put(NS, key, {"text": text})
        assert lexical.search(NS, query="my dog") == []
    index = {"dims": 5, "embed": ConceptEmbeddings()}
    with open_store(url, index=index) as store:  # type: ignore[arg-type]
        for key, text in docs.items():
            store.put(NS, key, {"text": text})
        found = store.search(NS, query="my dog")
        assert keys(found)[0] == "dog"
        assert 0.3 < found[0].score <= 1.0
        # the others share only the embeddings' common component: scored, but barely
        assert all(item.score < 0.05 for item in found[1:])  # type: ignore[operator]
        both = store.search(NS, query="headaches after short nights")
        assert keys(both)[0] == "pain"
    if store_backend.persistent:
        with open_store(url, index=index) as reopened:  # type: ignore[arg-type]
            assert keys(reopened.search(NS, query="vehicle"))[0] == "car"


def test_hybrid_score_mixes_lexical_and_semantic_parts(store_url: str) -> None:
    index = {"embed": ConceptEmbeddings()}
    with open_store(store_url, index=index, semantic_weight=0.25) as store:  # type: ignore[arg-type]
        store.put(NS, "dog", {"text": "beagle puppy"})  # embedded as (2, 0, 0, 0, 0.1)
        (hit,) = store.search(NS, query="beagle puppy")
        assert hit.score == pytest.approx(0.75 * 1.0 + 0.25 * 1.0, abs=1e-6)
        (hit,) = store.search(NS, query="dog")  # (1, 0, 0, 0, 0.1); no word in common
        cos = (2 + 0.01) / (math.sqrt(4.01) * math.sqrt(1.01))
        assert hit.score == pytest.approx(0.25 * cos, abs=1e-6)
        (hit,) = store.search(NS, query="beagle")  # every query word, the same concept
        assert hit.score == pytest.approx(0.75 * 1.0 + 0.25 * cos, abs=1e-6)


async def test_async_embedding_functions_work_with_the_async_api() -> None:
    async def embed(texts: Sequence[str]) -> list[list[float]]:
        return [ConceptEmbeddings()._embed(t) for t in texts]

    with open_store("memory://", index={"dims": 5, "embed": embed}) as store:
        await store.aput(NS, "dog", {"text": "a beagle puppy"})
        found = await store.asearch(NS, query="dog")
        assert keys(found) == ["dog"]


def test_wrong_embedding_sizes_are_refused() -> None:
    with open_store("memory://", index={"dims": 3, "embed": ConceptEmbeddings()}) as store:
        with pytest.raises(ConfigurationError, match="dims=3"):
            store.put(NS, "k", {"text": "beagle"})
        assert store.get(NS, "k") is None


# -- TTL ---------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def time(self) -> float:
        return self.now


def test_ttl_expiry_refresh_and_sweep(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(_store_base, "time", clock)
    with open_store(store_url, ttl={"default_ttl": 10}) as store:
        assert store.supports_ttl
        store.put(NS, "default", {"text": "kept ten minutes"})
        store.put(NS, "short", {"text": "kept one minute"}, ttl=1)
        store.put(NS, "forever", {"text": "kept"}, ttl=None)
        clock.now += 50
        assert store.get(NS, "short") is not None  # read: the clock restarts
        clock.now += 50
        assert store.get(NS, "short", refresh_ttl=False) is not None
        clock.now += 20
        assert store.get(NS, "short") is None  # 70 s after the last refresh
        assert sorted(keys(store.search(NS))) == ["default", "forever"]
        assert store.search(NS, query="kept one minute")[0].key != "short"
        clock.now += 600
        assert keys(store.search(NS)) == ["forever"]
        assert store.list_namespaces() == [NS]
        assert store.sweep_ttl() == 2
        store.put(NS, "default", {"text": "new"})  # a new item, not the expired one
        assert store.get(NS, "default").created_at.timestamp() == pytest.approx(clock.now)  # type: ignore[union-attr]


def test_ttl_must_be_positive(store: MemoryStore) -> None:
    with pytest.raises(ConfigurationError):
        store.put(NS, "k", {"v": 1}, ttl=-1)
    with pytest.raises(ConfigurationError):
        open_store("memory://", ttl={"default_ttl": 0})
    with pytest.raises(ConfigurationError):
        open_store("memory://", ttl={"sweep_every": 1})  # type: ignore[typeddict-unknown-key]


# -- lifecycle, persistence, concurrency -------------------------------------------------


def test_data_survives_reopen(store_backend: Backend, store_url: str) -> None:
    if not store_backend.persistent:
        pytest.skip(f"{store_backend} keeps nothing after close()")
    with open_store(store_url) as store:
        store.put(NS, "k", {"text": "persistent dark mode"})
    with open_store(store_url) as store:
        assert store.get(NS, "k").value == {"text": "persistent dark mode"}  # type: ignore[union-attr]
        assert keys(store.search(NS, query="dark mode")) == ["k"]


def test_the_store_can_share_a_file_with_the_checkpointer(tmp_path: Path) -> None:
    from statekeeper.checkpointers import open_checkpointer

    url = f"sqlite:///{tmp_path}/state.db"
    with open_checkpointer(url), open_store(url) as store:
        store.put(NS, "k", {"v": 1})
        assert store.get(NS, "k") is not None


def test_closed_store_refuses_work(store: MemoryStore) -> None:
    store.close()
    store.close()  # idempotent
    with pytest.raises(StorageError, match="closed"):
        store.get(NS, "k")


def test_threads_share_one_store(store: MemoryStore) -> None:
    def work(n: int) -> None:
        for i in range(20):
            store.put(NS, f"{n}-{i}", {"text": f"note {n} {i}"})
            store.search(NS, query=f"note {n}")

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(store.search(NS, limit=100)) == 80


async def test_async_api(store: MemoryStore) -> None:
    await store.aput(NS, "k", {"text": "async dark mode"})
    assert (await store.aget(NS, "k")).value == {"text": "async dark mode"}  # type: ignore[union-attr]
    assert keys(await store.asearch(NS, query="dark")) == ["k"]
    assert await store.alist_namespaces() == [NS]
    results = await asyncio.gather(*(store.aget(NS, "k") for _ in range(10)))
    assert all(r is not None for r in results)
    await store.adelete(NS, "k")
    assert await store.aget(NS, "k") is None


def test_a_compiled_graph_uses_the_store(store: MemoryStore) -> None:
    class State(TypedDict):
        question: str
        answer: list[str]

    def lookup(state: State, *, store: BaseStore) -> dict[str, Any]:
        found = store.search(NS, query=state["question"])
        return {"answer": [item.value["text"] for item in found]}

    store.put(NS, "k", {"text": "deploys happen on Tuesdays"})
    builder = StateGraph(State)
    builder.add_node("lookup", lookup)
    builder.add_edge(START, "lookup")
    graph = builder.compile(store=store)
    assert graph.invoke({"question": "when do deploys happen?"})["answer"] == [
        "deploys happen on Tuesdays"
    ]
    assert graph.invoke({"question": "football results"})["answer"] == []


# -- URLs --------------------------------------------------------------------------------


def test_open_store_urls_and_options(tmp_path: Path) -> None:
    assert known_store_schemes() == [
        "memory",
        "sqlite",
        "file",
        "redis",
        "rediss",
        "redis+cluster",
        "rediss+cluster",
        "postgres",
        "postgresql",
    ]
    with open_store(f"sqlite:///{tmp_path}/a/b.db?busy_timeout=2&semantic_weight=0.2") as s:
        assert s.path == f"{tmp_path}/a/b.db"
        assert s.semantic_weight == 0.2
        assert isinstance(s, BaseStore)
    with pytest.raises(ConfigurationError, match="known store schemes") as info:
        open_store("mongodb://x")
    for scheme in known_store_schemes():
        assert f"{scheme}://" in str(info.value)
    with pytest.raises(ConfigurationError):
        open_store("memory://somewhere")
    with pytest.raises(ConfigurationError):
        open_store("sqlite:///")
    with pytest.raises(ConfigurationError, match="unknown memory store option"):
        open_store("memory://?colour=red")
    with pytest.raises(ConfigurationError):
        open_store("memory://", semantic_weight=2.0)
    with pytest.raises(ConfigurationError):
        open_store("not a url")


def test_search_ops_validate_their_arguments(store: MemoryStore) -> None:
    with pytest.raises(ConfigurationError):
        store.batch([SearchOp(NS, query=42)])  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        store.batch([SearchOp(NS, filter=["not", "a", "mapping"])])  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        store.batch(["not an op"])  # type: ignore[list-item]
    assert json.dumps(store.search(NS)) == "[]"

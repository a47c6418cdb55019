"""The public surface of ``statekeeper.memory``: the names it exports, pinned so that a
change is a deliberate diff, and one release of compatibility for what moved — names that
left the package (importable from their modules) and keywords that moved into option
objects — each still working, with a DeprecationWarning pointing at the caller."""

from __future__ import annotations

import dataclasses
import datetime
import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

import statekeeper.memory
from statekeeper.memory.conflicts import KeepBothFlagged
from statekeeper.memory.eval import EvalSettings, evaluate, load_dataset
from statekeeper.memory.metrics import memory_stats
from statekeeper.memory.node import NoteOptions, StateOptions, SummarizationNode
from statekeeper.memory.recall import Freshness, Limits, RecallLog, recall
from statekeeper.memory.retrieval import RetrievalNode
from statekeeper.memory.store import MemoryStore, open_store
from tests.memory.conftest import ANA, T0, put_corpus

DAY = datetime.timedelta(days=1)
LATER = T0 + 400 * DAY


def clock() -> datetime.datetime:
    return LATER


@pytest.fixture
def corpus() -> Iterator[MemoryStore]:
    with open_store("memory://") as store:
        put_corpus(store)
        yield store


# -- the names -----------------------------------------------------------------------------


def test_the_public_surface_is_pinned() -> None:
    assert statekeeper.memory.__all__ == [
        "ChatModelSummarizer",
        "ExtractiveSummarizer",
        "Freshness",
        "Hit",
        "Hops",
        "Limits",
        "Note",
        "NoteOptions",
        "RetrievalNode",
        "SummarizationNode",
        "SummaryState",
        "format_memories",
        "memory_stats",
        "open_store",
        "recall",
        "with_summary",
    ]
    for name in statekeeper.memory.__all__:
        assert getattr(statekeeper.memory, name) is not None


# The names the package exported before its surface was curated, and where each lives.
MOVED = {
    "ConflictPolicy": "statekeeper.memory.conflicts",
    "KeepBothFlagged": "statekeeper.memory.conflicts",
    "LatestWins": "statekeeper.memory.conflicts",
    "ModelJudgedPolicy": "statekeeper.memory.conflicts",
    "Verdict": "statekeeper.memory.conflicts",
    "supersede_chain": "statekeeper.memory.conflicts",
    "write_note": "statekeeper.memory.conflicts",
    "write_notes": "statekeeper.memory.conflicts",
    "MemoryStats": "statekeeper.memory.metrics",
    "RunningSummary": "statekeeper.memory.node",
    "checkpoint_id_of": "statekeeper.memory.node",
    "notes_namespace": "statekeeper.memory.node",
    "NOTE_KIND": "statekeeper.memory.notes",
    "Provenance": "statekeeper.memory.notes",
    "note_key": "statekeeper.memory.notes",
    "note_migration": "statekeeper.memory.notes",
    "upgrade_note_value": "statekeeper.memory.notes",
    "DEFAULT_MIN_SCORE": "statekeeper.memory.recall",
    "MemoryStore": "statekeeper.memory.store",
    "SqliteStore": "statekeeper.memory.store",
    "known_store_schemes": "statekeeper.memory.store",
    "NoteDraft": "statekeeper.memory.summarize",
    "Summarizer": "statekeeper.memory.summarize",
    "Summary": "statekeeper.memory.summarize",
    "SummarizerOutputError": "statekeeper.errors",
}


@pytest.mark.parametrize(("name", "module"), sorted(MOVED.items()))
def test_a_name_that_moved_still_resolves_with_a_warning(name: str, module: str) -> None:
    assert name not in statekeeper.memory.__all__
    with pytest.warns(DeprecationWarning, match=f"import it from {module}") as warned:
        found = getattr(statekeeper.memory, name)
    assert found is getattr(importlib.import_module(module), name)
    assert warned[0].filename == __file__


def test_from_import_of_a_moved_name_warns_and_unknown_names_fail() -> None:
    with pytest.warns(DeprecationWarning, match="statekeeper.memory.notes_namespace"):
        from statekeeper.memory import notes_namespace
    assert notes_namespace("a.b") == ("notes", "a%2Eb")
    missing = "nothing_here"
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        getattr(statekeeper.memory, missing)


# -- the option objects ---------------------------------------------------------------------


def test_option_objects_are_frozen_and_check_their_fields() -> None:
    for options in (Limits(), Freshness(), RecallLog(), NoteOptions(), StateOptions()):
        field = dataclasses.fields(options)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(options, field, None)
    assert Limits() == Limits(k=5, min_score=0.3, filter=None)
    assert EvalSettings().limits == Limits(k=10)


# -- recall's old keywords --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ({"k": 1}, {"limits": Limits(k=1)}),
        ({"min_score": 0.0, "k": 40}, {"limits": Limits(k=40, min_score=0.0)}),
        ({"filter": {"topics": ["Biscuit"]}}, {"limits": Limits(filter={"topics": ["Biscuit"]})}),
        ({"as_of": T0 - DAY}, {"freshness": Freshness(as_of=T0 - DAY)}),
        (
            {"clock": clock, "include_expired": True},
            {"freshness": Freshness(clock=clock, include_expired=True)},
        ),
        (
            {"clock": clock, "max_age": 30 * DAY},
            {"freshness": Freshness(clock=clock, max_age=30 * DAY)},
        ),
        (
            {"clock": clock, "half_life": 7 * DAY},
            {"freshness": Freshness(clock=clock, half_life=7 * DAY)},
        ),
    ],
)
def test_recall_keywords_still_work_with_a_warning(
    corpus: MemoryStore, old: dict[str, Any], new: dict[str, Any]
) -> None:
    query = "Does Ana have a dog, what is Biscuit like?"
    expected = recall(corpus, ANA, query, log=False, **new)
    with pytest.warns(DeprecationWarning, match=r"recall\(\): keyword arguments moved") as warned:
        found = recall(corpus, ANA, query, log=False, **old)
    assert found == expected
    assert warned[0].filename == __file__
    for name in old:
        assert f"{name}=..." in str(warned[0].message)


def test_recall_thread_id_moved_into_the_log(corpus: MemoryStore) -> None:
    with pytest.warns(DeprecationWarning, match=r"log=RecallLog\(thread_id=\.\.\.\)"):
        recall(corpus, ANA, "Biscuit", thread_id="t1")
    with pytest.warns(DeprecationWarning, match="thread_id"):
        recall(corpus, ANA, "Biscuit", thread_id="t2", log=False)  # as before: not logged
    recall(corpus, ANA, "Biscuit", log=RecallLog(thread_id="t1"))
    assert [row.group for row in memory_stats(corpus).threads] == ["t1"]
    assert memory_stats(corpus, thread_id="t1").overall.recalls == 2


def test_an_old_keyword_replaces_that_field_of_the_option_object(corpus: MemoryStore) -> None:
    mixed = Limits(k=1, min_score=0.0)
    with pytest.warns(DeprecationWarning, match=r"k=\.\.\. -> limits=Limits\(k=\.\.\.\)"):
        hits = recall(corpus, ANA, "Ana", limits=mixed, k=3, log=False)
    assert hits == recall(corpus, ANA, "Ana", limits=Limits(k=3, min_score=0.0), log=False)


def test_unknown_and_invalid_keywords_are_refused(corpus: MemoryStore) -> None:
    from statekeeper.errors import ConfigurationError

    with pytest.raises(TypeError, match="unexpected keyword argument 'limit'"):
        recall(corpus, ANA, "Ana", limit=3)  # type: ignore[call-arg]
    with (
        pytest.raises(ConfigurationError, match="k must be"),
        pytest.warns(DeprecationWarning, match="k="),
    ):
        recall(corpus, ANA, "Ana", k=0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'as_of'"):
        RetrievalNode(as_of=T0)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'namespaces'"):
        SummarizationNode(budget_tokens=10, namespaces=("x",))  # type: ignore[call-arg]


# -- the nodes' and the evaluation's old keywords ---------------------------------------------


def test_retrieval_node_keywords_still_work_with_a_warning(corpus: MemoryStore) -> None:
    wanted = {"topics": ["Biscuit"]}
    with pytest.warns(DeprecationWarning, match=r"RetrievalNode\(\)") as warned:
        node = RetrievalNode(
            store=corpus,
            namespace=ANA,
            k=2,
            min_score=0.1,
            filter=wanted,
            include_expired=True,
            max_age=900 * DAY,
            half_life=30 * DAY,
            now=clock,
        )
    assert warned[0].filename == __file__
    assert "now=... -> freshness=Freshness(clock=...)" in str(warned[0].message)
    assert node.limits == Limits(k=2, min_score=0.1, filter=wanted)
    assert node.freshness == Freshness(
        include_expired=True, max_age=900 * DAY, half_life=30 * DAY, clock=clock
    )
    same = RetrievalNode(store=corpus, namespace=ANA, limits=node.limits, freshness=node.freshness)
    state = {"messages": [HumanMessage("Tell me about Biscuit the beagle")]}
    config: Any = {"configurable": {"thread_id": "t1"}}
    assert node(state, config) == same(state, config)
    assert node(state, config)["memories"]


def test_summarization_node_keywords_still_work_with_a_warning() -> None:
    def count(messages: Any) -> int:
        return len(messages)

    policy = KeepBothFlagged()
    with pytest.warns(DeprecationWarning, match=r"SummarizationNode\(\)") as warned:
        node = SummarizationNode(
            budget_tokens=10,
            store=False,
            token_counter=count,
            namespace=("memories",),
            messages_key="history",
            summary_key="memory",
            now=clock,
            conflict_policy=policy,
        )
    assert warned[0].filename == __file__
    assert node.notes == NoteOptions(namespace=("memories",), conflict_policy=policy, clock=clock)
    assert node.state == StateOptions(
        messages_key="history", summary_key="memory", token_counter=count
    )
    # the flat attributes the node had are still there
    assert (node.token_counter, node.namespace, node.now) == (count, ("memories",), clock)
    assert (node.messages_key, node.summary_key, node.conflict_policy) == (
        "history",
        "memory",
        policy,
    )


def test_evaluate_keywords_still_work_with_a_warning(tmp_path: Path) -> None:
    tiny = load_dataset(Path(__file__).parent / "data" / "tiny.json")
    settings = EvalSettings(budget_tokens=150, limits=Limits(k=3))
    expected = evaluate(tiny, settings).to_json()
    with pytest.warns(DeprecationWarning, match=r"evaluate\(\)") as warned:
        report = evaluate(tiny, budget_tokens=150, k=3, min_score=None)
    assert warned[0].filename == __file__
    assert report.to_json() == expected
    assert report.settings["min_score"] == Limits().min_score

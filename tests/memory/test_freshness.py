"""Freshness in recall, with an injected clock: the time asked about, validity windows,
``max_age``, and the half-life decay that reorders relevant notes without a new floor."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from statekeeper.errors import ConfigurationError
from statekeeper.memory.notes import Note
from statekeeper.memory.recall import DEFAULT_MIN_SCORE, Freshness, Limits, recall
from statekeeper.memory.retrieval import RetrievalNode
from statekeeper.memory.store import SqliteStore
from tests.memory.conftest import ANA, T0, make_note

DAY = datetime.timedelta(days=1)


def at(day: float) -> datetime.datetime:
    return T0 + day * DAY


def clock(day: float) -> Any:
    return lambda: at(day)


def put(target: Any, *notes: Note) -> list[str]:
    for note in notes:
        target.put(ANA, note.key, note.to_value())
    return [note.key for note in notes]


def keys(hits: Any) -> list[str]:
    return [hit.key for hit in hits]


def colour(day: int, text: str = "Ana's favourite colour is green") -> Note:
    return make_note(text, message_ids=(f"m{day}",), day=day)


def test_the_clock_is_the_default_as_of(any_store: Any) -> None:
    old, new = put(any_store, colour(0), colour(10, "Ana's favourite colour is blue now"))
    assert keys(
        recall(any_store, ANA, "favourite colour", freshness=Freshness(clock=clock(5)))
    ) == [old]
    assert set(
        keys(recall(any_store, ANA, "favourite colour", freshness=Freshness(clock=clock(11))))
    ) == {old, new}
    assert keys(
        recall(any_store, ANA, "colour", freshness=Freshness(as_of=at(5), clock=clock(11)))
    ) == [old]
    # the default clock is the real one: every note of 2024 is known by now
    assert set(keys(recall(any_store, ANA, "favourite colour"))) == {old, new}


def test_expired_notes_are_recalled_only_when_asked_for(any_store: Any) -> None:
    note = colour(0).model_copy(update={"valid_to": at(3)})
    (key,) = put(any_store, note)
    assert recall(any_store, ANA, "favourite colour", freshness=Freshness(clock=clock(5))) == []
    assert keys(
        recall(any_store, ANA, "favourite colour", freshness=Freshness(clock=clock(2)))
    ) == [key]
    assert (
        recall(any_store, ANA, "favourite colour", freshness=Freshness(as_of=at(3))) == []
    )  # valid_to excluded
    expired = recall(
        any_store,
        ANA,
        "favourite colour",
        freshness=Freshness(clock=clock(5), include_expired=True),
    )
    assert keys(expired) == [key]
    # include_expired lifts validity alone: a note made later is still unknown then
    assert (
        recall(
            any_store,
            ANA,
            "favourite colour",
            freshness=Freshness(as_of=at(-1), include_expired=True),
        )
        == []
    )


def test_a_note_valid_from_a_later_date_waits_for_it(any_store: Any) -> None:
    note = colour(0, "Ana starts at Acme as a nurse").model_copy(update={"valid_from": at(10)})
    (key,) = put(any_store, note)
    assert recall(any_store, ANA, "Acme nurse", freshness=Freshness(clock=clock(5))) == []
    assert keys(recall(any_store, ANA, "Acme nurse", freshness=Freshness(clock=clock(10)))) == [key]
    assert keys(
        recall(
            any_store, ANA, "Acme nurse", freshness=Freshness(clock=clock(5), include_expired=True)
        )
    ) == [key]


def test_max_age_drops_what_was_said_too_long_ago(any_store: Any) -> None:
    old, new = put(any_store, colour(0), colour(30, "Ana's favourite colour is blue now"))
    found = recall(
        any_store, ANA, "favourite colour", freshness=Freshness(clock=clock(31), max_age=7 * DAY)
    )
    assert keys(found) == [new]
    edge = colour(0).observed_at + 31 * DAY
    kept = recall(
        any_store, ANA, "favourite colour", freshness=Freshness(as_of=edge, max_age=31 * DAY)
    )
    assert set(keys(kept)) == {old, new}  # said exactly max_age before: kept
    second = datetime.timedelta(seconds=1)
    assert keys(
        recall(any_store, ANA, "colour", freshness=Freshness(as_of=edge, max_age=31 * DAY - second))
    ) == [new]


def test_half_life_ranks_recent_notes_first(any_store: Any) -> None:
    old, new = put(any_store, colour(0), colour(30, "Ana's favourite colour is blue"))
    plain = recall(any_store, ANA, "favourite colour", freshness=Freshness(clock=clock(31)))
    assert {hit.score for hit in plain} == {1.0}
    assert {hit.freshness for hit in plain} == {1.0}
    decayed = recall(
        any_store, ANA, "favourite colour", freshness=Freshness(clock=clock(31), half_life=10 * DAY)
    )
    assert keys(decayed) == [new, old]
    for hit, day in zip(decayed, (30, 0), strict=True):
        age = at(31) - colour(day).observed_at
        assert hit.freshness == pytest.approx(0.5 ** (age / (10 * DAY)))
        assert hit.score == 1.0
    assert decayed[0].to_dict()["freshness"] == decayed[0].freshness
    # k applies after the reranking, whatever order the store returns
    (best,) = recall(
        any_store,
        ANA,
        "colour",
        limits=Limits(k=1),
        freshness=Freshness(clock=clock(31), half_life=10 * DAY),
    )
    assert best.key == new


def test_decay_reorders_but_the_floor_is_on_relevance(any_store: Any) -> None:
    exact, partial = put(
        any_store,
        colour(0, "Ana's favourite colour is green, like her bike"),
        colour(60, "Ana painted the bike a new colour, blue"),
        make_note("Standup moves to Tuesdays", message_ids=("x",), day=60),
    )[:2]
    query = "favourite colour bike"
    relevance = {
        hit.key: hit.score
        for hit in recall(any_store, ANA, query, freshness=Freshness(clock=clock(61)))
    }
    assert relevance[exact] > relevance[partial] >= DEFAULT_MIN_SCORE
    hits = recall(any_store, ANA, query, freshness=Freshness(clock=clock(61), half_life=5 * DAY))
    assert keys(hits) == [partial, exact]  # 61 days at a 5-day half-life: 1/4096 of the weight
    assert hits[1].score * hits[1].freshness < 0.001 < DEFAULT_MIN_SCORE
    assert [hit.score for hit in hits] == [relevance[partial], relevance[exact]]
    assert all(hit.score >= DEFAULT_MIN_SCORE for hit in hits)


@pytest.mark.parametrize(
    "options",
    [
        {"max_age": datetime.timedelta(0)},
        {"max_age": -DAY},
        {"half_life": datetime.timedelta(0)},
        {"half_life": 7},
        {"max_age": "7d"},
        {"as_of": datetime.datetime(2024, 5, 8)},
        {"clock": lambda: datetime.datetime(2024, 5, 8)},
    ],
)
def test_bad_time_options_are_refused(store: SqliteStore, options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        recall(store, ANA, "anything", freshness=Freshness(**options))


def test_the_retrieval_node_recalls_as_of_its_clock(any_store: Any) -> None:
    old, new = put(any_store, colour(0), colour(30, "Ana's favourite colour is blue"))
    state = {"messages": [HumanMessage("What's my favourite colour?")]}
    early = RetrievalNode(store=any_store, namespace=ANA, freshness=Freshness(clock=clock(5)))
    assert [m["key"] for m in early(state, {})["memories"]] == [old]
    fresh = RetrievalNode(
        store=any_store, namespace=ANA, freshness=Freshness(clock=clock(31), half_life=10 * DAY)
    )
    memories = fresh(state, {})["memories"]
    assert [m["key"] for m in memories] == [new, old]
    assert memories[1]["freshness"] < memories[0]["freshness"] <= 1.0
    recent = RetrievalNode(
        store=any_store, namespace=ANA, freshness=Freshness(clock=clock(31), max_age=7 * DAY)
    )
    assert [m["key"] for m in recent(state, {})["memories"]] == [new]
    with pytest.raises(ConfigurationError):
        RetrievalNode(namespace=ANA, freshness=Freshness(half_life=-DAY))

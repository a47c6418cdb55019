"""What a query names beyond its terms: the entities a second recall round follows
(``Limits.hops``), the time window a question asks about (``Freshness.windows``), and
what recall does with them on every store."""

from __future__ import annotations

import dataclasses
import datetime

import pytest

from statekeeper.errors import ConfigurationError
from statekeeper.memory.recall import Freshness, Hops, Limits, recall
from statekeeper.memory.store import MemoryStore
from statekeeper.memory.store.query import entities, hop_query, merge_hops, time_window
from tests.memory.conftest import ANA, T0, make_note

ASKED = datetime.datetime(2024, 5, 8, 13, 0, tzinfo=datetime.UTC)  # a Wednesday
DAY = datetime.timedelta(days=1)


def test_entities_are_the_capitalised_names_without_speaker_or_stopwords() -> None:
    text = (
        "Ana: Rough evening. Biscuit swallowed a sock. My brother Karim joined "
        "Northwind Logistics in Dublin, and I told Karim so."
    )
    assert entities(text) == ["Rough", "Biscuit", "Karim", "Northwind Logistics", "Dublin"]
    assert entities(text, exclude=("karim", "DUBLIN")) == [
        "Rough",
        "Biscuit",
        "Northwind Logistics",
    ]
    assert entities("just lower case words, nothing named") == []
    assert hop_query(["Leo: I met Maya.", "Maya lives in Porto."]) == "Maya Porto"
    assert hop_query(["no names here"]) == ""


@pytest.mark.parametrize(
    ("question", "start", "days"),
    [
        ("what did I do last week?", datetime.date(2024, 4, 29), 7),
        ("anything new this week?", datetime.date(2024, 5, 6), 7),
        ("what did we plan two weeks ago?", datetime.date(2024, 4, 22), 7),
        ("what happened 3 days ago?", datetime.date(2024, 5, 5), 1),
        ("what did I say yesterday?", datetime.date(2024, 5, 7), 1),
        ("and today?", datetime.date(2024, 5, 8), 1),
        ("what did I start on 2024-04-26?", datetime.date(2024, 4, 26), 1),
        ("what did I start on 26 April 2024?", datetime.date(2024, 4, 26), 1),
        ("what did I start on April 26th, 2024?", datetime.date(2024, 4, 26), 1),
        ("what did Ana pick up in April 2024?", datetime.date(2024, 4, 1), 30),
        ("where did I travel in March?", datetime.date(2024, 3, 1), 31),
        ("what did I buy in June?", datetime.date(2023, 6, 1), 30),  # the latest June
        ("what did I read last month?", datetime.date(2024, 4, 1), 30),
        ("any trips last year?", datetime.date(2023, 1, 1), 365),
    ],
)
def test_time_windows_resolve_against_the_moment_asked(
    question: str, start: datetime.date, days: int
) -> None:
    window = time_window(question, ASKED)
    assert window is not None
    assert window.start == datetime.datetime.combine(start, datetime.time(), tzinfo=datetime.UTC)
    assert window.end - window.start == days * DAY
    assert window.holds(window.start)
    assert not window.holds(window.end)
    assert window.phrase.casefold() in question.casefold()


def test_no_window_when_none_is_named_or_the_date_does_not_exist() -> None:
    assert time_window("which city does Maya live in?", ASKED) is None
    assert time_window("what happened on 2024-02-31?", ASKED) is None
    assert time_window("what happened on 31 April 2024?", ASKED) is None
    past = time_window("the past week", ASKED)
    assert past is not None
    assert past.holds(ASKED)
    assert past.holds(ASKED - 6 * DAY)


@pytest.mark.parametrize("field", ["seeds", "max_notes", "max_tokens"])
@pytest.mark.parametrize("value", [0, -1, 1.5, True, "2"])
def test_hops_refuse_what_is_not_a_positive_integer(field: str, value: object) -> None:
    with pytest.raises(ConfigurationError, match=f"Hops.{field} must be an integer >= 1"):
        Hops(**{field: value})  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="hops must be a Hops"):
        Limits(hops=2)  # type: ignore[arg-type]


def test_merge_hops_keeps_within_notes_and_tokens() -> None:
    texts = ["x" * 40, "y" * 400, "z" * 40, "w" * 40]
    assert merge_hops(texts, str, Hops(max_notes=2, max_tokens=30)) == ["x" * 40, "z" * 40]
    assert merge_hops(texts, str, Hops(max_notes=1, max_tokens=1000)) == ["x" * 40]
    assert merge_hops(texts, str, Hops(max_tokens=1)) == []


def _chain(store: MemoryStore) -> dict[str, str]:
    """A two-hop fact: the booking names Karim, another note says where he lives."""
    notes = {
        "booking": make_note(
            "Ana: Just booked flights to visit Karim for a long weekend.", message_ids=("m1",)
        ),
        "home": make_note(
            "Ana: My brother Karim got the journalist job he wanted, in Dublin.",
            message_ids=("m2",),
            day=3,
        ),
        "bakery": make_note("Ana: The bakery on the corner closed for good.", message_ids=("m3",)),
        "rain": make_note("Ana: Rain all day, so we stayed in.", message_ids=("m4",)),
        "bike": make_note("Ana: My new bike is blue.", message_ids=("m5",)),
    }
    for note in notes.values():
        store.put(ANA, note.key, note.to_value())
    return {note.key: name for name, note in notes.items()}


def test_a_second_round_follows_the_names_of_the_first(store: MemoryStore) -> None:
    names = _chain(store)
    question = "Which city did Ana fly to when visiting Karim?"
    as_of = Freshness(as_of=T0 + 10 * DAY)
    one = Limits(k=5, hops=None)
    first = recall(store, ANA, question, limits=one, freshness=as_of)
    assert [names[hit.key] for hit in first] == ["booking"]
    hops = Limits(k=5)  # Hops() is the default
    assert hops.hops == Hops()
    hopped = recall(store, ANA, question, limits=hops, freshness=as_of)
    assert [names[hit.key] for hit in hopped] == ["booking", "home"]
    # best first and above the floor: a hop scores at most what the first round's last did
    assert hopped[1].score <= hopped[0].score
    assert hopped[1].score >= 0.3
    assert hopped[1].provenance.message_ids == ("m2",)
    # within k: a full first round leaves no room for a hop
    assert len(recall(store, ANA, question, limits=Limits(k=1, hops=Hops()), freshness=as_of)) == 1
    # within the token bound
    tight = Limits(k=5, min_score=0.3, hops=Hops(max_tokens=3))
    assert len(recall(store, ANA, question, limits=tight, freshness=as_of)) == 1
    # the floor may still return nothing, and then there is no second round
    assert recall(store, ANA, "Explain quantum entanglement", limits=hops, freshness=as_of) == []
    # freshness holds in the second round too: the home note is not known yet
    early = Freshness(as_of=T0 + DAY)
    assert [names[h.key] for h in recall(store, ANA, question, limits=hops, freshness=early)] == [
        "booking"
    ]


def test_a_named_window_ranks_the_notes_said_in_it_first(store: MemoryStore) -> None:
    # T0 is 2024-05-08; without a window the shorter note ranks first
    old = make_note("Ana started a pottery class at the center.", message_ids=("m1",), day=-20)
    new = make_note("Ana started a pottery class.", message_ids=("m2",), day=0)
    for note in (new, old):
        store.put(ANA, note.key, note.to_value())
    asked = Freshness(as_of=T0 + DAY)
    for question in ("Which class did Ana start in April 2024?", "What did Ana start last month?"):
        plain = recall(store, ANA, question, freshness=dataclasses.replace(asked, windows=False))
        assert [hit.key for hit in plain] == [new.key, old.key]
        assert [hit.key for hit in recall(store, ANA, question, freshness=asked)] == [
            old.key,
            new.key,
        ]
    # relative to as_of: asked a month later, "last month" is May
    later = Freshness(as_of=T0 + 30 * DAY)
    hits = recall(store, ANA, "What did Ana start last month?", freshness=later)
    assert [hit.key for hit in hits] == [new.key, old.key]
    # a window boosts, it does not filter, and the floor still applies
    assert recall(store, ANA, "quantum physics in April 2024", freshness=asked) == []

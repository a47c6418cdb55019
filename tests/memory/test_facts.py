"""Fact-keyed recall: what fact a question asks about (``memory._units.facts``), the notes
keyed by it ranked first and recalled by their key, and the values they replaced brought
back for questions about the past, on every store (with embeddings too)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from statekeeper.errors import ConfigurationError
from statekeeper.memory._units.facts import asked_fact
from statekeeper.memory.conflicts import write_notes
from statekeeper.memory.notes import Note
from statekeeper.memory.recall import DEFAULT_MIN_SCORE, Freshness, Limits, recall
from statekeeper.memory.retrieval import format_memories
from tests.memory.conftest import ANA, T0, make_note

DAY = datetime.timedelta(days=1)
LATER = Freshness(as_of=T0 + 100 * DAY)


def keyed(text: str, day: int, attribute: str, subject: str = "Ana") -> Note:
    note = make_note(text, message_ids=(f"m{day}",), day=day)
    return note.model_copy(update={"subject": subject.casefold(), "attribute": attribute})


# -- reading the question -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "attributes", "subjects", "past"),
    [
        ("Who does Marcus work for now?", {"employer", "occupation"}, {"marcus"}, False),
        ("Where is Ana living these days?", {"home"}, {"ana"}, False),
        ("What vehicle does Ana drive?", {"car"}, {"ana"}, False),
        ("Does Ana still eat meat?", {"diet"}, {"ana"}, False),
        ("Which employer hired Ana first?", {"employer"}, {"ana"}, True),
        ("Where did Ana live before she moved to Toronto?", {"home"}, {"ana", "toronto"}, True),
        ("What is Ana's brother's occupation?", {"occupation"}, {"ana's brother"}, False),
        ("What does Ana do for a living?", {"occupation"}, {"ana"}, False),
        ("Is Ana allergic to anything?", {"allergy"}, {"ana"}, False),
    ],
)
def test_the_fact_a_question_asks(
    question: str, attributes: set[str], subjects: set[str], past: bool
) -> None:
    asked = asked_fact(question)
    assert asked is not None
    assert (set(asked.attributes), set(asked.subjects), asked.past) == (attributes, subjects, past)


@pytest.mark.parametrize(
    "question",
    [
        "Where does she work?",  # no one named
        "What does the person Ana is surprising do for a living?",  # described, not named
        "",
        "   ?!",
    ],
)
def test_questions_that_ask_no_fact(question: str) -> None:
    assert asked_fact(question) is None


@pytest.mark.parametrize(
    "question",
    [
        "What did Ana make in class?",
        "Which month did Ana's pet need emergency care?",  # "care" is not "car"
        "Which city did Ana fly to?",  # a city is not always a home
    ],
)
def test_questions_that_ask_no_attribute(question: str) -> None:
    asked = asked_fact(question)
    assert asked is not None
    assert asked.attributes == frozenset()
    for attribute in ("home", "employer", "occupation", "car", "diet", "allergy to peanuts"):
        assert not asked.matches(keyed("x", 0, attribute))


def test_a_note_matches_by_attribute_and_subject() -> None:
    asked = asked_fact("Where does Ana live now?")
    assert asked is not None
    assert asked.matches(keyed("Ana: I live in Lisbon.", 0, "home"))
    assert not asked.matches(keyed("Leo: I live in Rome.", 0, "home", subject="Leo"))
    assert not asked.matches(keyed("Ana: I work at Acme.", 0, "employer"))
    assert not asked.matches(make_note("Ana: I live in Lisbon."))  # no key
    allergy = asked_fact("Which ingredient is Ana allergic to?")
    assert allergy is not None
    assert allergy.matches(keyed("x", 0, "allergy to peanuts"))
    # an attribute outside the vocabulary matches a question holding all of its words
    colour = asked_fact("What is Ana's favorite color?")
    assert colour is not None
    assert colour.attributes == frozenset()
    assert colour.matches(keyed("x", 0, "favorite color"))
    assert not colour.matches(keyed("x", 0, "favorite food"))


# -- recall ---------------------------------------------------------------------------------


def test_the_keyed_note_ranks_first_among_equals(any_store: Any) -> None:
    notes = [
        make_note("Ana: I've been listening to jazz while working.", message_ids=("m1",)),
        make_note("Ana: Work was chaos, two meetings back to back.", message_ids=("m2",)),
        keyed("Ana: I'm joining Tidewater Labs as a designer.", 3, "employer"),
    ]
    write_notes(any_store, ANA, notes)
    hits = recall(any_store, ANA, "Who does Ana work for now?", freshness=LATER)
    assert hits[0].key == notes[2].key
    assert hits[0].score >= DEFAULT_MIN_SCORE
    assert hits[0].provenance.message_ids == ("m3",)


def test_a_keyed_note_the_words_miss_is_recalled_by_its_key(any_store: Any) -> None:
    note = keyed("Ana: Traded in the old Corolla. We drove home in a Hyundai Ioniq!", 0, "car")
    write_notes(any_store, ANA, [note, make_note("Ana: lovely weather", message_ids=("m9",))])
    question = "What vehicle does Ana have now?"
    (hit,) = recall(any_store, ANA, question, freshness=LATER)
    assert (hit.key, hit.score) == (note.key, DEFAULT_MIN_SCORE)
    # off: only the words count, and they do not match
    unkeyed = Freshness(as_of=LATER.as_of, facts=False)
    assert recall(any_store, ANA, question, freshness=unkeyed) == []
    # a floor above the key's worth keeps it out; a filter naming someone else too
    assert recall(any_store, ANA, question, limits=Limits(min_score=0.5), freshness=LATER) == []
    other = Limits(filter={"subject": "leo"})
    assert recall(any_store, ANA, question, limits=other, freshness=LATER) == []
    # someone else's fact is not Ana's
    assert recall(any_store, ANA, "What vehicle does Leo have now?", freshness=LATER) == []


def test_a_question_about_the_past_gets_the_values_replaced(any_store: Any) -> None:
    first = keyed("Ana: I'm starting as a nurse at Crescent Bank.", 0, "employer")
    second = keyed("Ana: I handed in my notice; joining Lumen Studio.", 10, "employer")
    third = keyed("Ana: Lumen was a mistake, I'm back at Crescent Bank.", 20, "employer")
    write_notes(any_store, ANA, [first, second, third])
    now = recall(any_store, ANA, "Who does Ana work for now?", freshness=LATER)
    assert [hit.key for hit in now] == [third.key]
    past = recall(any_store, ANA, "Which employer hired Ana first?", freshness=LATER)
    assert [hit.key for hit in past] == [first.key, second.key, third.key]  # oldest first
    assert len({hit.score for hit in past}) == 1  # scored as the note that replaced them
    assert [hit.note.superseded_by for hit in past] == [second.key, third.key, None]
    assert "superseded" in format_memories(past).splitlines()[0]
    # what was not known yet is not told
    early = Freshness(as_of=T0 + 15 * DAY)
    assert [
        h.key for h in recall(any_store, ANA, "Which employer hired Ana first?", freshness=early)
    ] == [
        first.key,
        second.key,
    ]
    # within k
    assert (
        len(
            recall(
                any_store,
                ANA,
                "Which employer hired Ana first?",
                limits=Limits(k=2),
                freshness=LATER,
            )
        )
        == 2
    )


@pytest.mark.parametrize("name", ["facts", "windows"])
def test_the_switches_are_checked(name: str) -> None:
    with pytest.raises(ConfigurationError, match=name):
        Freshness(**{name: "yes"})

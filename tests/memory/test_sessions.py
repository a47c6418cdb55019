"""Session notes (``memory._units.sessions``): one per session beside the statements'
notes, with provenance to all of its messages, one note for a session cut by compactions,
short whatever the session's length; and recall's rules for them and for repeated notes
(``memory._units.ranking.distinct``), on every store."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.graph.message import add_messages
from langgraph.store.memory import InMemoryStore

from statekeeper.errors import ConfigurationError
from statekeeper.memory._units.ranking import distinct
from statekeeper.memory._units.sessions import (
    MAX_TOKENS,
    SESSION_SUMMARIZER,
    asks_what_was_said,
    sessions,
)
from statekeeper.memory.node import NoteOptions, SummarizationNode
from statekeeper.memory.notes import Note
from statekeeper.memory.recall import DEFAULT_MIN_SCORE, Freshness, Hit, Limits, recall
from tests.memory.conftest import make_note

T0 = datetime.datetime(2024, 4, 26, 9, 0, tzinfo=datetime.UTC)
CONFIG: Any = {"configurable": {"thread_id": "ana"}}
NAMESPACE = ("notes", "ana")


def at(minutes: float) -> dict[str, str]:
    return {"timestamp": (T0 + datetime.timedelta(minutes=minutes)).isoformat()}


def said(id_: str, text: str, minutes: float, *, ai: bool = False) -> BaseMessage:
    if ai:
        return AIMessage(text, id=id_, additional_kwargs=at(minutes))
    return HumanMessage(text, id=id_, name="Ana", additional_kwargs=at(minutes))


def morning() -> list[BaseMessage]:
    return [
        said("m1", "Just booked flights to see Karim in Dublin for a long weekend.", 0),
        said("m2", "Lovely! How long since you last visited Karim?", 1, ai=True),
        said("m3", "Two years. I also enrolled in a watercolor course yesterday.", 2),
        said("m4", "Watercolor is a great hobby!", 3, ai=True),
    ]


def evening() -> list[BaseMessage]:  # the next day
    day = 24 * 60
    return [
        said("e1", "Biscuit swallowed a sock, we ended up at the emergency vet.", day),
        said("e2", "Oh no! Is Biscuit all right now?", day + 1, ai=True),
        said("e3", "Yes, he is fine, thanks.", day + 2),
    ]


def node(store: Any, **options: Any) -> SummarizationNode:
    notes = NoteOptions(clock=lambda: T0 + datetime.timedelta(days=2), **options)
    return SummarizationNode(budget_tokens=1, keep_tokens=0, store=store, notes=notes)


def stored(store: Any) -> list[Note]:
    return [Note.from_value(item.value) for item in store.search(NAMESPACE, limit=1000)]


def sessions_of(store: Any) -> list[Note]:
    notes = [n for n in stored(store) if n.unit == "session"]
    return sorted(notes, key=lambda n: n.observed_at)


SUMMARY: dict[int, Any] = {}  # the running summary of a store's thread, by store


def compact(store: Any, messages: list[BaseMessage], **options: Any) -> list[BaseMessage]:
    """One compaction of ``messages`` (the last turn is kept, as the node's rules say),
    with the running summary the previous one left, as a graph's state holds it."""
    state: dict[str, Any] = {"messages": messages}
    if id(store) in SUMMARY:
        state["summary"] = SUMMARY[id(store)]
    update = node(store, **options)(state, CONFIG)
    if not update:
        return messages
    SUMMARY[id(store)] = update["summary"]
    return list(add_messages(messages, update["messages"]))


# -- what sessions are ------------------------------------------------------------------


def test_sessions_are_runs_of_messages_close_in_time() -> None:
    hour = datetime.timedelta(hours=1)
    messages = [SystemMessage("Be brief.", id="s"), *morning(), *evening()]
    runs = sessions(messages, hour)
    assert [run.ids for run in runs] == [("m1", "m2", "m3", "m4"), ("e1", "e2", "e3")]
    # a message without a time belongs to the run it is in
    untimed = AIMessage("Noted.", id="x")
    assert [run.ids for run in sessions([*morning()[:2], untimed, *morning()[2:]], hour)] == [
        ("m1", "m2", "x", "m3", "m4")
    ]
    assert [run.ids for run in sessions([HumanMessage("hi", id="a")], hour)] == [("a",)]
    # a time going back starts a session too
    back = [said("b1", "x", 60 * 24), said("b2", "y", 0)]
    assert len(sessions(back, hour)) == 2
    assert sessions([], hour) == []


# -- the node writes them ---------------------------------------------------------------


def test_one_note_per_session_with_all_of_its_messages() -> None:
    store = InMemoryStore()
    compact(store, [*morning(), *evening(), said("k", "Anything else to remember?", 3 * 24 * 60)])
    first, second = sessions_of(store)
    assert first.provenance.message_ids == ("m1", "m2", "m3", "m4")
    assert second.provenance.message_ids == ("e1", "e2", "e3")
    assert first.provenance.summarizer == SESSION_SUMMARIZER
    assert (first.provenance.said_from, first.provenance.said_to) == (
        T0,
        T0 + datetime.timedelta(minutes=3),
    )
    assert first.text.startswith("Ana and Assistant (2024-04-26): Karim, Dublin")
    assert {"travel", "hobby", "2024-04-26", "April 2024"} <= set(first.topics)
    assert [(d.phrase, d.start.isoformat()) for d in first.dates] == [("yesterday", "2024-04-25")]
    assert "Biscuit" in second.text
    assert all(len(note.text) <= MAX_TOKENS * 4 for note in (first, second))
    turns = [n for n in stored(store) if n.unit == "turn"]
    assert {i for n in turns for i in n.provenance.message_ids} <= set(
        first.provenance.message_ids + second.provenance.message_ids
    )


def test_a_session_cut_by_compactions_keeps_one_note() -> None:
    store = InMemoryStore()
    messages = morning()[:2]
    messages = compact(
        store, [*messages, said("m3", "Two years. I enrolled in a watercolor course.", 2)]
    )
    (part,) = sessions_of(store)
    assert part.provenance.message_ids == ("m1", "m2")
    later = [*messages, said("m4", "Watercolor is fun!", 3, ai=True), said("m5", "It is.", 4)]
    summary = SUMMARY[id(store)]
    compact(store, later)
    (whole,) = sessions_of(store)
    assert whole.key == part.key  # told again, not written twice
    assert whole.provenance.message_ids == ("m1", "m2", "m3", "m4")
    assert whole.provenance.said_from == part.provenance.said_from
    assert whole.topics[: len(part.topics) - 2] == part.topics[:-2]  # its first part's first
    SUMMARY[id(store)] = summary  # a retried step: the same state again
    compact(store, later)
    assert sessions_of(store) == [whole]
    # without the running summary, the node cannot know the session goes on: a new note
    SUMMARY.pop(id(store))
    compact(store, [*later, said("m6", "One more thing about watercolor.", 5)])
    assert len(sessions_of(store)) == 2


def test_long_sessions_stay_short() -> None:
    store = InMemoryStore()
    chat = [
        said(f"m{i}", f"I met Person{i} at the Museum{i} and talked about Topic{i}.", i)
        for i in range(60)
    ]
    compact(store, [*chat, said("k", "Bye for now, talk soon.", 24 * 60)])
    (note,) = sessions_of(store)
    assert len(note.text) <= MAX_TOKENS * 4
    assert len(note.provenance.message_ids) == 60


def test_chit_chat_makes_no_session_note_and_no_gap_makes_none_at_all() -> None:
    store = InMemoryStore()
    chat = [said("h1", "Hi!", 0), said("h2", "Hello, Ana!", 1, ai=True), said("h3", "Ok", 2)]
    compact(store, [*chat, said("k", "Anything new?", 3)])
    assert sessions_of(store) == []
    off = InMemoryStore()
    compact(off, [*morning(), said("k", "Anything else?", 24 * 60)], session_gap=None)
    assert sessions_of(off) == []
    assert [n.unit for n in stored(off)] == ["turn"] * len(stored(off))


@pytest.mark.parametrize("gap", [datetime.timedelta(0), datetime.timedelta(hours=-1), 3600, "1h"])
def test_a_bad_session_gap_is_refused(gap: Any) -> None:
    with pytest.raises(ConfigurationError, match="session_gap"):
        NoteOptions(session_gap=gap)


# -- recall ---------------------------------------------------------------------------------


def test_session_notes_answer_questions_about_what_was_said_when(any_store: Any) -> None:
    compact(any_store, [*morning(), *evening(), said("k", "Anything else?", 3 * 24 * 60)])
    first, second = sessions_of(any_store)
    asked = Freshness(as_of=T0 + datetime.timedelta(days=3))

    def ask(question: str) -> list[Hit]:
        return recall(any_store, NAMESPACE, question, freshness=asked)

    # a question asking what was said when: the sessions of that time, found by it
    (hit,) = [h for h in ask("What did we talk about on 2024-04-26?") if h.note.unit == "session"]
    assert (hit.key, hit.score) == (first.key, DEFAULT_MIN_SCORE)
    assert ask("What did Ana and I discuss on 2024-04-26?")[0].key == first.key
    # asked on Monday 29 April: both were last week, in the order they were held
    last_week = ask("What did we talk about last week?")
    assert [h.key for h in last_week if h.note.unit == "session"] == [first.key, second.key]
    assert last_week[0].key == first.key
    assert [h for h in ask("What happened this week?") if h.note.unit == "session"] == []
    # any other question: the statements answer it, never a session note
    for question in (
        "Who is Karim and where does he live?",
        "Karim flights on 2024-04-26",
        "What did we say about Karim on 2024-04-26?",
    ):
        assert all(h.note.unit == "turn" for h in ask(question)), question
    # a floor above what time is worth keeps them out
    high = recall(
        any_store,
        NAMESPACE,
        "What did we talk about on 2024-04-26?",
        limits=Limits(min_score=0.9),
        freshness=asked,
    )
    assert all(h.note.unit == "turn" for h in high)


@pytest.mark.parametrize(
    ("question", "window", "overview"),
    [
        ("What did we talk about last week?", "last week", True),
        ("What happened on 2024-04-26?", "2024-04-26", True),
        ("What did Ana and I discuss yesterday?", "yesterday", True),
        ("Anything new today?", "today", True),
        ("What did Ana say about Karim yesterday?", "yesterday", False),
        ("Which activity did Ana pick up in April 2024?", "in April 2024", False),
    ],
)
def test_what_asks_what_was_said(question: str, window: str, overview: bool) -> None:
    assert asks_what_was_said(question, window) is overview


def hit(text: str, unit: str = "turn", ids: tuple[str, ...] = ("m1",)) -> Hit:
    note = make_note(text, message_ids=ids).model_copy(update={"unit": unit})
    return Hit(note, 0.5, note.key, NAMESPACE)


def test_distinct_leaves_out_repeats_and_covered_sessions() -> None:
    small_talk = [
        hit("Ana: Finally some free time.", ids=("a",)),
        hit("Ana: So, finally some free time!", ids=("b",)),
        hit("Ana: By the way, finally some free time.", ids=("c",)),
        hit("Ana: I adopted a cat.", ids=("d",)),
    ]
    assert [h.note.text for h in distinct(small_talk, 10)] == [
        "Ana: Finally some free time.",
        "Ana: I adopted a cat.",
    ]
    assert len(distinct(small_talk, 1)) == 1
    session = hit("Ana and Assistant (2024-04-26): cat.", "session", ("c", "d", "e"))
    # a statement of the session kept, before or after it: the session note goes
    assert distinct([session, small_talk[3]], 10) == [small_talk[3]]
    assert distinct([small_talk[3], session], 10) == [small_talk[3]]
    # k counts what is kept
    assert distinct([session, small_talk[3], small_talk[0]], 2) == [small_talk[3], small_talk[0]]
    other = hit("Ana and Assistant (2024-04-27): dog.", "session", ("x", "y"))
    assert distinct([other, small_talk[3]], 10) == [other, small_talk[3]]
    assert distinct([], 3) == []

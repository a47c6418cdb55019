"""Time expressions resolved against when they were said (``memory._units.temporal``):
every kind of expression, the tense that decides a bare "Saturday", timezones and naive
timestamps, and what is left alone (ambiguous words, impossible dates, bad input)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from statekeeper.memory._units.temporal import TimeSpan, anchor_day, annotate, resolve
from statekeeper.memory._units.tense import tense_of
from statekeeper.memory.node import NoteOptions, SummarizationNode
from statekeeper.memory.notes import Note
from statekeeper.memory.recall import Freshness, recall

WEDNESDAY = datetime.date(2024, 5, 8)


def days(text: str, said: datetime.datetime | datetime.date = WEDNESDAY) -> list[str]:
    return [span.label for span in resolve(text, said)]


@pytest.mark.parametrize(
    ("text", "label"),
    [
        # days
        ("I adopted a cat yesterday", "2024-05-07"),
        ("see you tomorrow", "2024-05-09"),
        ("the day before yesterday", "2024-05-06"),
        ("the day after tomorrow", "2024-05-10"),
        ("we talked last night", "2024-05-07"),
        ("this morning was busy", "2024-05-08"),
        ("tonight we cook", "2024-05-08"),
        # weekdays with a direction
        ("last Tuesday", "2024-05-07"),
        ("last Wednesday", "2024-05-01"),  # never the day said itself
        ("next Wednesday", "2024-05-15"),
        ("next Friday", "2024-05-10"),
        ("this Monday", "2024-05-06"),
        ("the coming Sunday", "2024-05-12"),
        # units
        ("two weeks ago", "week of 2024-04-22"),
        ("3 days ago", "2024-05-05"),
        ("a couple of days ago", "2024-05-06"),
        ("two months ago", "March 2024"),
        ("a year ago", "2023"),
        ("last week", "week of 2024-04-29"),
        ("this week", "week of 2024-05-06"),
        ("next month", "June 2024"),
        ("last year", "2023"),
        ("last weekend", "weekend of 2024-05-04"),
        ("next weekend", "weekend of 2024-05-11"),
        ("this weekend", "weekend of 2024-05-11"),
        ("the past week", "2024-05-02 to 2024-05-08"),
        ("in three weeks I start", "week of 2024-05-27"),
        ("ten days from now", "2024-05-18"),
        # months
        ("We moved in March.", "March 2024"),  # the past: the latest March
        ("The conference is in March.", "March 2025"),  # a plan: the next one
        ("vegetarian since February", "February 2024"),
        ("last March", "March 2024"),
        ("next March", "March 2025"),
        ("in March 2023", "March 2023"),
        ("in May", "May 2024"),
        # dates
        ("on 5 March 2024", "2024-03-05"),
        ("March 5th, 2024", "2024-03-05"),
        ("we met on the 5th of March", "2024-03-05"),
        ("we met on March 5", "2024-03-05"),
        ("2024-04-26", "2024-04-26"),
        ("in 2023 I lived there", "2023"),
        # days of the month
        ("on the 5th we met", "2024-05-05"),
        ("on the 5th I'll fly", "2024-06-05"),
        ("I'm starting on the first of the month.", "2024-06-01"),
        ("on the 31st we party", "2024-05-31"),
    ],
)
def test_each_kind_of_expression(text: str, label: str) -> None:
    assert days(text) == [label]


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("We adopted a beagle puppy on Saturday!", "2024-05-04"),  # past: the one before
        ("The movers come Saturday.", "2024-05-11"),  # the present: a plan
        ("Our street is having a yard sale on Saturday.", "2024-05-11"),
        ("Work was chaos on Tuesday.", "2024-05-07"),
        ("I'll call her on Monday.", "2024-05-13"),
        ("I booked a table for Friday.", "2024-05-10"),  # "for" a day: the future
        ("I've been vegetarian since Monday.", "2024-05-06"),  # "since": the past
        ("I'm so excited about Saturday.", "2024-05-11"),  # "excited" is no past tense
        ("Work was chaos on Wednesday.", "2024-05-08"),  # the day said itself
        ("We hiked over the weekend.", "weekend of 2024-05-04"),
    ],
)
def test_a_bare_weekday_goes_by_tense(text: str, label: str) -> None:
    assert days(text) == [label]


def test_the_nearest_marker_of_tense_before_it_decides_else_the_one_after() -> None:
    text = "I went there on Monday and will go again on Friday."
    assert days(text) == ["2024-05-06", "2024-05-10"]
    start = text.index("Friday")
    assert tense_of(text, start, start + len("Friday")) == "future"
    assert days("On Monday we went there.") == ["2024-05-06"]
    assert days("On Monday we will go there.") == ["2024-05-13"]
    assert tense_of("Monday.", 0, 6) == "future"  # no marker at all: a plan
    # a marker in another sentence does not count
    assert days("I went out. The party is on Friday.") == ["2024-05-10"]


def test_the_anchor_is_the_day_in_the_timestamp_s_own_timezone() -> None:
    # 00:30 in Lisbon summer time is still the previous day in UTC: the speaker's day counts
    lisbon = datetime.datetime(
        2024, 5, 8, 0, 30, tzinfo=datetime.timezone(datetime.timedelta(hours=1))
    )
    assert anchor_day(lisbon) == WEDNESDAY
    assert lisbon.astimezone(datetime.UTC).date() == datetime.date(2024, 5, 7)
    assert days("yesterday", lisbon) == ["2024-05-07"]
    naive = datetime.datetime(2024, 5, 8, 23, 59)  # read as written
    assert days("tomorrow", naive) == ["2024-05-09"]
    assert days("tomorrow", naive) == days("tomorrow", naive.replace(tzinfo=datetime.UTC))


def test_spans_are_half_open_ranges_of_days() -> None:
    (week,) = resolve("last week", WEDNESDAY)
    assert (week.start, week.end) == (datetime.date(2024, 4, 29), datetime.date(2024, 5, 6))
    assert (week.phrase, week.position, week.relative) == ("last week", 0, True)
    (month,) = resolve("We moved in December.", datetime.date(2024, 1, 10))
    assert month.months == (datetime.date(2023, 12, 1),)
    (past,) = resolve("the past week", WEDNESDAY)
    assert past.months == (datetime.date(2024, 5, 1),)
    (long,) = resolve("the past year", WEDNESDAY)
    assert len(long.months) == 13
    (iso,) = resolve("on 2024-04-26", WEDNESDAY)
    assert not iso.relative
    assert TimeSpan("x", WEDNESDAY, WEDNESDAY + datetime.timedelta(days=3), 0).label == (
        "2024-05-08 to 2024-05-10"
    )


def test_annotate_labels_relative_expressions_once() -> None:
    text, spans = annotate("I adopted a cat yesterday. It was 2024-05-07.", WEDNESDAY)
    assert text == "I adopted a cat yesterday (2024-05-07). It was 2024-05-07."
    assert [span.phrase for span in spans] == ["yesterday", "2024-05-07"]
    again, _ = annotate(text, WEDNESDAY)
    assert again == text  # already labelled: not labelled twice
    assert annotate("nothing to see", WEDNESDAY) == ("nothing to see", [])
    # the day said is in the note's provenance: not labelled, but still a span
    text, spans = annotate("Work was chaos today, and on Wednesday too.", WEDNESDAY)
    assert text == "Work was chaos today, and on Wednesday too."
    assert [span.label for span in spans] == ["2024-05-08", "2024-05-08"]


@pytest.mark.parametrize(
    "text",
    [
        "I may go",  # a verb
        "they march on",  # a verb, no preposition
        "the 5th time I tried",  # an ordinal, not a date
        "on Saturdays we swim",  # a habit, not a day
        "I finished the whole book in two days.",  # past: a duration
        "I haven't visited in two years",  # a duration too
        "9999 years from now",  # beyond the calendar
        "99999 days ago",  # not a number of days this reads
        "on 2024-02-30",  # no such day
        "",
    ],
)
def test_what_is_left_alone(text: str) -> None:
    assert resolve(text, WEDNESDAY) == []
    assert annotate(text, WEDNESDAY) == (text, [])


def test_impossible_days_keep_only_the_month_they_name() -> None:
    assert days("on 31 February 2024") == ["February 2024"]
    # no month within reach has a 31st in this direction: the nearest one that does
    assert days("On the 31st I left.", datetime.date(2024, 3, 15)) == ["2024-01-31"]
    assert days("on the 30th we go", datetime.date(2024, 2, 10)) == ["2024-03-30"]


def test_expressions_do_not_overlap() -> None:
    spans = resolve("last Tuesday and next Saturday, in March 2025", WEDNESDAY)
    assert [span.phrase for span in spans] == ["last Tuesday", "next Saturday", "March 2025"]
    assert [span.position for span in spans] == [0, 17, 35]


def test_a_date_is_its_own_anchor() -> None:
    assert anchor_day(WEDNESDAY) is WEDNESDAY
    assert days("yesterday", datetime.date(2024, 3, 1)) == ["2024-02-29"]  # a leap year
    assert days("a month ago", datetime.date(2024, 3, 31)) == ["February 2024"]
    assert days("last year", datetime.date(9999, 6, 1)) == ["9998"]
    assert days("next year", datetime.date(9998, 6, 1)) == []  # 9999 has no end in range
    assert days("2 years ago", datetime.date(1, 6, 1)) == []


# -- through the node and recall, on every store --------------------------------------


def test_a_question_naming_the_day_meant_finds_the_note(any_store: Any) -> None:
    said = {"timestamp": "2024-05-08T22:30:00-04:00"}  # 9 May in UTC: the speaker's day counts
    messages = [
        HumanMessage("I adopted a kitten yesterday, her name is Miso.", id="h1", name="Ana",
                     additional_kwargs=said),
        AIMessage("Congratulations on Miso!", id="a1", additional_kwargs=said),
        HumanMessage("We moved house last month, boxes everywhere.", id="h2", name="Ana",
                     additional_kwargs=said),
        AIMessage("Good luck unpacking!", id="a2", additional_kwargs=said),
        HumanMessage("Thanks, talk soon.", id="h3", name="Ana", additional_kwargs=said),
    ]  # fmt: skip
    made = NoteOptions(clock=lambda: datetime.datetime(2024, 5, 9, 3, tzinfo=datetime.UTC))
    node = SummarizationNode(budget_tokens=1, keep_tokens=0, store=any_store, notes=made)
    node({"messages": messages}, {"configurable": {"thread_id": "ana"}})
    notes = {
        Note.from_value(item.value).text: Note.from_value(item.value)
        for item in any_store.search(("notes", "ana"), limit=100)
    }
    kitten = notes["Ana: I adopted a kitten yesterday (2024-05-07), her name is Miso."]
    assert [(d.phrase, d.start.isoformat()) for d in kitten.dates] == [("yesterday", "2024-05-07")]
    assert "2024-05-07" in kitten.topics
    moved = notes["Ana: We moved house last month (April 2024), boxes everywhere."]
    assert "April 2024" in moved.topics
    asked = Freshness(as_of=datetime.datetime(2024, 6, 1, tzinfo=datetime.UTC))
    hits = recall(any_store, ("notes", "ana"), "What did Ana adopt on 2024-05-07?", freshness=asked)
    assert hits[0].key == kitten.key
    # what happened that day: the session that named it, then what was said of it
    hits = recall(any_store, ("notes", "ana"), "What happened on 2024-05-07?", freshness=asked)
    assert [hit.note.unit for hit in hits[:2]] == ["session", "turn"]
    assert hits[1].key == kitten.key
    # said in May, about April: the window matches the dates it names
    question = "Which house move happened in April 2024?"
    hits = recall(any_store, ("notes", "ana"), question, freshness=asked)
    assert hits[0].key == moved.key
    hits = recall(any_store, ("notes", "ana"), "What did Ana do in April 2024?", freshness=asked)
    assert [hit.note.unit for hit in hits[:2]] == ["session", "turn"]
    assert hits[1].key == moved.key

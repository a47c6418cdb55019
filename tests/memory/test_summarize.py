"""Summarizers: the offline extractive one and the one over a chat model."""

from __future__ import annotations

import datetime
import json
import logging
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from statekeeper.errors import StatekeeperError
from statekeeper.memory._extractive import resolve_dates, split_sentences
from statekeeper.memory.summarize import (
    ChatModelSummarizer,
    ExtractiveSummarizer,
    NoteDraft,
    Summarizer,
    SummarizerOutputError,
    Summary,
)

SAID = {"timestamp": "2024-05-08T10:00:00+00:00"}  # a Wednesday


def conversation() -> list[BaseMessage]:
    return [
        SystemMessage("You are a helpful assistant.", id="s1"),
        HumanMessage(
            "Hi! I adopted a cat yesterday. It's called Miso. Haha.",
            name="Ana",
            id="h1",
            additional_kwargs=SAID,
        ),
        AIMessage("Congrats! What breed is Miso?", id="a1", additional_kwargs=SAID),
        HumanMessage("A Siamese.", name="Ana", id="h2", additional_kwargs=SAID),
        AIMessage("ok", id="a2"),
        HumanMessage("thanks!", id="h3"),
        AIMessage("", tool_calls=[{"name": "weather", "args": {}, "id": "c1"}], id="a3"),
        ToolMessage("Lisbon: 22C and sunny.", tool_call_id="c1", name="weather", id="t1"),
        HumanMessage(
            "Last week I flew to Lisbon with Bob for the Web Summit.",
            name="Ana",
            id="h4",
            additional_kwargs=SAID,
        ),
    ]


def texts(summary: Summary) -> list[str]:
    return [note.text for note in summary.notes]


class TestExtractive:
    def test_is_a_summarizer_with_a_versioned_name(self) -> None:
        assert isinstance(ExtractiveSummarizer(), Summarizer)
        assert ExtractiveSummarizer.name == "extractive/4"

    def test_one_note_per_statement_with_speaker_and_resolved_dates(self) -> None:
        summary = ExtractiveSummarizer().summarize(conversation(), None)
        assert texts(summary) == [
            "Ana: I adopted a cat yesterday (2024-05-07). It's called Miso.",
            "Assistant: What breed is Miso?",
            "Assistant asked: What breed is Miso? Ana: A Siamese.",
            "weather (tool result): Lisbon: 22C and sunny.",
            "Ana: Last week (week of 2024-04-29) I flew to Lisbon with Bob for the Web Summit.",
        ]

    def test_notes_point_at_their_messages(self) -> None:
        notes = ExtractiveSummarizer().summarize(conversation(), None).notes
        assert [note.message_ids for note in notes] == [
            ("h1",),
            ("a1",),
            ("a1", "h2"),
            ("t1",),
            ("h4",),
        ]

    def test_chit_chat_system_and_tool_calls_make_no_note(self) -> None:
        summarizer = ExtractiveSummarizer()
        for message in conversation():
            if message.id in ("s1", "a2", "h3", "a3"):
                assert summarizer.summarize([message], None).notes == ()

    def test_topics_are_names_numbers_and_rare_words(self) -> None:
        notes = ExtractiveSummarizer().summarize(conversation(), None).notes
        assert "Miso" in notes[0].topics
        assert "2024-05-07" in notes[0].topics
        assert "yesterday" not in notes[0].topics
        assert {"Lisbon", "Bob", "Web", "Summit"} <= set(notes[-1].topics)
        assert "22C" in notes[3].topics
        assert all(len(note.topics) <= 10 for note in notes)

    def test_topics_name_the_concepts_a_statement_is_about(self) -> None:
        said = [HumanMessage("Traded in the Volvo today. We drove home in a Kia EV6!", id="1")]
        [note] = ExtractiveSummarizer().summarize(said, None).notes
        assert {"vehicle", "car", "Volvo", "Kia", "EV6"} <= set(note.topics)
        allergic = [HumanMessage("I'm allergic to peanuts.", id="1")]
        [note] = ExtractiveSummarizer().summarize(allergic, None).notes
        assert {"food", "diet"} <= set(note.topics)
        relocated = [HumanMessage("We relocated to a flat near the river.", id="1")]
        [note] = ExtractiveSummarizer().summarize(relocated, None).notes
        assert {"move", "home"} <= set(note.topics)  # compared by stem: "relocated"

    def test_topics_date_the_statement(self) -> None:
        notes = ExtractiveSummarizer().summarize(conversation(), None).notes
        assert notes[0].topics[-2:] == ("2024-05-08", "May 2024")
        assert all(len(note.topics) <= 12 for note in notes)
        undated = [HumanMessage("I adopted a cat named Miso.", id="1")]
        [note] = ExtractiveSummarizer().summarize(undated, None).notes
        assert "2024" not in " ".join(note.topics)

    def test_is_deterministic(self) -> None:
        first = ExtractiveSummarizer().summarize(conversation(), "- before")
        second = ExtractiveSummarizer().summarize(conversation(), "- before")
        assert first == second

    def test_summary_carries_the_previous_one_forward_within_its_bound(self) -> None:
        summary = ExtractiveSummarizer().summarize(conversation(), "- Ana likes green tea")
        lines = summary.text.splitlines()
        assert lines[0] == "- Ana likes green tea"
        assert (
            "- 2024-05-08 Ana: I adopted a cat yesterday (2024-05-07). It's called Miso." in lines
        )

        small = ExtractiveSummarizer(max_summary_tokens=30)
        text = small.summarize(conversation(), "- Ana likes green tea").text
        assert len(text) <= 30 * 4
        assert "Ana likes green tea" not in text  # the oldest lines go first

    def test_digest_keeps_the_most_salient_statements(self) -> None:
        summary = ExtractiveSummarizer(digest_size=1).summarize(conversation(), None)
        assert summary.text == (
            "- 2024-05-08 Ana: Last week (week of 2024-04-29) I flew to Lisbon with Bob "
            "for the Web Summit."
        )

    def test_a_long_single_line_is_truncated(self) -> None:
        text = ExtractiveSummarizer(max_summary_tokens=5).summarize(conversation(), None).text
        assert text.endswith("…")
        assert len(text) <= 20

    def test_only_chit_chat_keeps_the_previous_summary(self) -> None:
        chat = [HumanMessage("ok thanks", id="1"), AIMessage("You're welcome!", id="2")]
        assert ExtractiveSummarizer().summarize(chat, "- before") == Summary("- before")
        assert ExtractiveSummarizer().summarize(chat, None) == Summary("")

    def test_a_short_message_is_one_note(self) -> None:
        message = HumanMessage(
            "Okay, I handed in my notice at Acme. In three weeks I'm joining Initech.", id="1"
        )
        assert texts(ExtractiveSummarizer().summarize([message], None)) == [
            "User: Okay, I handed in my notice at Acme. In three weeks I'm joining Initech."
        ]

    def test_a_leaning_sentence_joins_the_previous_one(self) -> None:
        filler = "The weather has been grey and cold for most of the week, as it usually is."
        message = HumanMessage(
            f"I bought a bike. It is red. My sister lives in Oslo. {filler} {filler} {filler}",
            id="1",
        )
        assert texts(ExtractiveSummarizer().summarize([message], None))[:2] == [
            "User: I bought a bike. It is red.",
            "User: My sister lives in Oslo.",
        ]

    def test_greetings_and_farewells_make_no_note(self) -> None:
        chat = [
            HumanMessage("Morning! Got a minute?", name="Ana", id="1"),
            AIMessage("Always. Good morning, Ana. What's on your mind?", id="2"),
            HumanMessage("Okay, I need to run. Talk soon!", name="Ana", id="3"),
            AIMessage("Take care, Ana! Talk soon.", id="4"),
        ]
        assert ExtractiveSummarizer().summarize(chat, None).notes == ()
        said = [HumanMessage("Hi! Good news: my sister moved to Oslo. Talk soon!", id="1")]
        assert texts(ExtractiveSummarizer().summarize(said, None)) == [
            "User: Good news: my sister moved to Oslo."
        ]

    def test_long_statements_are_cut_into_pieces(self) -> None:
        message = AIMessage(" ".join(f"word{i}" for i in range(200)), id="1")
        notes = ExtractiveSummarizer().summarize([message], None).notes
        assert len(notes) == 3
        assert all(note.message_ids == ("1",) for note in notes)

    def test_list_content_and_bullets(self) -> None:
        message = AIMessage(
            [{"type": "text", "text": "Plan:\n- Book the flight to Rome\n- Pack the camera"}],
            id="1",
        )
        assert texts(ExtractiveSummarizer().summarize([message], None)) == [
            "Assistant: Plan:",
            "Assistant: Book the flight to Rome",
            "Assistant: Pack the camera",
        ]

    def test_bad_parameters(self) -> None:
        with pytest.raises(ValueError, match="max_summary_tokens"):
            ExtractiveSummarizer(max_summary_tokens=0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I moved here today", "I moved here today"),  # the day said: in the provenance
        ("back tomorrow", "back tomorrow (2024-05-09)"),
        ("3 days ago", "3 days ago (2024-05-05)"),
        ("two weeks ago", "two weeks ago (week of 2024-04-22)"),
        ("a year ago", "a year ago (2023)"),
        ("last month", "last month (April 2024)"),
        ("next month", "next month (June 2024)"),
        ("last Monday", "last Monday (2024-05-06)"),
        ("last Wednesday", "last Wednesday (2024-05-01)"),
        ("next Friday", "next Friday (2024-05-10)"),
        ("last weekend", "last weekend (weekend of 2024-05-04)"),
        ("next weekend", "next weekend (weekend of 2024-05-11)"),
        ("last year", "last year (2023)"),
        ("this morning", "this morning"),
        ("on Wednesday", "on Wednesday"),  # said on a Wednesday: that day
        ("on Friday", "on Friday (2024-05-10)"),
        ("the yesterdays", "the yesterdays"),
    ],
)
def test_relative_dates(text: str, expected: str) -> None:
    assert resolve_dates(text, datetime.date(2024, 5, 8)) == expected


def test_last_weekend_said_on_a_sunday_is_the_one_before() -> None:
    assert resolve_dates("last weekend", datetime.date(2024, 5, 12)) == (
        "last weekend (weekend of 2024-05-04)"
    )


def test_sentences_do_not_split_after_abbreviations_or_initials() -> None:
    assert split_sentences("Dr. Smith met J. Doe at 5 p.m. today. Then? Home!") == [
        "Dr. Smith met J. Doe at 5 p.m. today.",
        "Then?",
        "Home!",
    ]


class RecordingModel(FakeListChatModel):
    """A fake chat model that also keeps the prompts it was sent."""

    prompts: list[list[BaseMessage]] = []  # a pydantic field: each model gets its own copy

    def _call(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> str:
        self.prompts.append(messages)
        return super()._call(messages, *args, **kwargs)


def model_answering(*answers: Any) -> RecordingModel:
    return RecordingModel(
        responses=[a if isinstance(a, str) else json.dumps(a) for a in answers], prompts=[]
    )


CHAT = [
    HumanMessage("I adopted a cat named Miso.", name="Ana", id="h1", additional_kwargs=SAID),
    AIMessage("What a nice name!", id="a1"),
    AIMessage("", tool_calls=[{"name": "vet", "args": {"city": "Porto"}, "id": "c1"}], id="a2"),
]


class TestChatModel:
    def test_notes_and_summary_come_from_the_model(self) -> None:
        model = model_answering(
            {
                "summary": "Ana adopted Miso.",
                "notes": [
                    {"text": "Ana adopted a cat named Miso.", "sources": [1], "topics": ["Miso"]},
                    {"text": "The assistant liked the name.", "sources": ["a1", 9, "x"]},
                    {"text": "Something.", "sources": []},
                    {"text": "  ", "sources": [1]},
                ],
            }
        )
        summary = ChatModelSummarizer(model).summarize(CHAT, "- before")
        assert summary == Summary(
            "Ana adopted Miso.",
            (
                NoteDraft("Ana adopted a cat named Miso.", ("h1",), ("Miso",)),
                NoteDraft("The assistant liked the name.", ("a1",)),
                NoteDraft("Something.", ("h1", "a1", "a2")),  # no valid source: all of them
            ),
        )
        system, request = model.prompts[0]
        assert isinstance(system, SystemMessage)
        assert "JSON" in system.text
        assert "- before" in request.text
        assert "[1] 2024-05-08T10:00:00+00:00 Ana (human): I adopted a cat named Miso." in (
            request.text
        )
        assert '[3] Assistant (ai): [calls vet({"city": "Porto"})]' in request.text

    def test_a_fenced_answer_is_accepted(self) -> None:
        answer = '```json\n{"summary": "s", "notes": []}\n```'
        assert ChatModelSummarizer(model_answering(answer)).summarize(CHAT, None) == Summary("s")

    def test_is_a_summarizer_named_after_its_model(self) -> None:
        summarizer = ChatModelSummarizer(model_answering("{}"))
        assert isinstance(summarizer, Summarizer)
        assert summarizer.name == "chat/2:RecordingModel"
        assert ChatModelSummarizer(model_answering("{}"), name="mine/2").name == "mine/2"

    @pytest.mark.parametrize(
        "answer",
        ["I cannot do that.", '{"summary": 3}', '{"notes": []}', '{"summary": "s", "notes": 1'],
    )
    def test_malformed_answers_fall_back_to_the_extractive_summarizer(
        self, answer: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        with caplog.at_level(logging.WARNING, logger="statekeeper.memory.summarize"):
            summary = ChatModelSummarizer(model_answering(answer)).summarize(CHAT, None)
        expected = ExtractiveSummarizer().summarize(CHAT, None)
        assert summary == Summary(expected.text, expected.notes, "extractive/4")
        assert "summarizing with extractive/4 instead" in caplog.text

    def test_malformed_answers_raise_without_a_fallback(self) -> None:
        summarizer = ChatModelSummarizer(model_answering("no json"), fallback=None)
        with pytest.raises(SummarizerOutputError, match="no JSON object") as caught:
            summarizer.summarize(CHAT, None)
        assert isinstance(caught.value, StatekeeperError)

    def test_another_fallback_is_named(self) -> None:
        class Fixed:
            name = "fixed/1"

            def summarize(
                self, messages: Sequence[BaseMessage], previous_summary: str | None
            ) -> Summary:
                return Summary("fixed")

        summarizer = ChatModelSummarizer(model_answering("nope"), fallback=Fixed())
        assert summarizer.summarize(CHAT, None) == Summary("fixed", (), "fixed/1")


# -- fact keys ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I live in Lisbon.", ("ana", "home")),
        ("The movers come Saturday. We're officially relocating to Toronto!", ("ana", "home")),
        ("We moved to Porto last year.", ("ana", "home")),
        ("My sister lives in Dublin.", ("ana's sister", "home")),
        ("I signed! I'm starting as a data analyst at Northwind Logistics.", ("ana", "employer")),
        ("I handed in my notice at Acme. I'm joining Globex as a nurse.", ("ana", "employer")),
        ("It's official: Initech hired me as their new designer.", ("ana", "employer")),
        ("I quit my job today.", ("ana", "employer")),
        ("My brother works at Acme Corp.", ("ana's brother", "employer")),
        ("I work as a pediatric nurse.", ("ana", "occupation")),
        ("Traded in the Volvo. We drove home in a Kia EV6!", ("ana", "car")),
        ("I bought a new car!", ("ana", "car")),
        ("I've gone fully vegetarian.", ("ana", "diet")),
        ("I stopped eating meat a few weeks ago.", ("ana", "diet")),
        ("I'm allergic to peanuts.", ("ana", "allergy to peanuts")),
        # no single-valued fact asserted
        ("Do you live in Lisbon?", None),
        ("I'm thinking of moving to Paris.", None),
        ("If I moved to Paris I would miss the sea.", None),
        ("My car broke down again.", None),
        ("I drove to work.", None),
        ("I start Monday.", None),
        ("I'm joining Anna for lunch.", None),
        ("We adopted a beagle named Biscuit.", None),  # a second pet replaces no first one
        ("My coworker lives in Madrid.", None),
        ("After six years in Lisbon I still get lost.", None),
    ],
)
def test_fact_keys_of_statements(text: str, expected: tuple[str, str] | None) -> None:
    [note] = ExtractiveSummarizer().summarize([HumanMessage(text, name="Ana", id="1")], None).notes
    assert note.fact == expected


def test_only_people_state_facts_and_the_key_adds_its_question_words() -> None:
    said = [
        HumanMessage("We're relocating to Toronto!", name="Ana", id="h"),
        AIMessage("I live in the cloud, and I moved to Porto.", id="a"),
        HumanMessage("I work at Acme.", id="u"),
    ]
    human, assistant, user = ExtractiveSummarizer().summarize(said, None).notes
    assert human.fact == ("ana", "home")
    assert {"home", "lives"} <= set(human.topics)
    assert assistant.fact is None
    assert user.fact == ("user", "employer")
    assert {"work", "job", "employer"} <= set(user.topics)


def test_chat_model_notes_may_name_their_fact() -> None:
    model = model_answering(
        {
            "summary": "s",
            "notes": [
                {"text": "Ana lives in Toronto.", "sources": [1], "subject": " Ana ",
                 "attribute": "Home"},
                {"text": "Ana likes cats.", "sources": [1], "subject": "Ana"},
                {"text": "Ana has a cat.", "sources": [1], "subject": "", "attribute": "pet"},
            ],
        }
    )  # fmt: skip
    notes = ChatModelSummarizer(model).summarize(CHAT, None).notes
    assert [note.fact for note in notes] == [("ana", "home"), None, None]
    system, _ = model.prompts[0]
    assert '"subject"' in system.text
    assert '"attribute"' in system.text


_SUMMARIZE_DATASET = """
import hashlib, json, sys
from langchain_core.messages import AIMessage, HumanMessage
from statekeeper.memory.summarize import ExtractiveSummarizer

summarizer, digest = ExtractiveSummarizer(), hashlib.sha256()
for conversation in json.load(open(sys.argv[1]))["conversations"]:
    for session in conversation["sessions"]:
        messages = [
            (HumanMessage if m["role"] == "user" else AIMessage)(m["text"], id=m["id"])
            for m in session["messages"]
        ]
        for start in range(0, len(messages), 24):
            digest.update(summarizer.summarize(messages[start : start + 24], None).text.encode())
print(digest.hexdigest())
"""


def test_the_extractive_summary_is_the_same_in_every_process() -> None:
    # Salience sums over a set of words, whose order follows the hash seed: summed in
    # that order, ties between statements broke differently from process to process.
    import os
    import subprocess
    import sys
    from pathlib import Path

    dataset = Path(__file__).resolve().parents[2] / "benchmarks" / "memory" / "test.json"
    digests = {
        subprocess.run(
            [sys.executable, "-c", _SUMMARIZE_DATASET, str(dataset)],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("0", "1", "2")
    }
    assert len(digests) == 1

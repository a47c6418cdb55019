"""``statekeeper memory eval --answers``: the offline reader's metrics on hand-computed
cases, truncation of the history, a chat model as the reader, and a whole answer
evaluation of the tiny dataset."""

from __future__ import annotations

import datetime
import json
import xml.dom.minidom
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from statekeeper.errors import ConfigurationError
from statekeeper.memory.eval import (
    CONDITIONS,
    AnswerSettings,
    ChatReader,
    EvalSettings,
    FreshnessCut,
    Reading,
    SpanReader,
    answers_chart,
    evaluate_answers,
    load_dataset,
    reader_from,
    render_answers,
)
from statekeeper.memory.eval._answers import fit, history_context
from statekeeper.memory.eval._dataset import Message, Session
from statekeeper.memory.eval._play import tokens
from statekeeper.memory.eval._readers import (
    answer_tokens,
    best_span_f1,
    contains,
    normalize,
    token_f1,
)

TINY = Path(__file__).parent / "data" / "tiny.json"

# -- normalisation and metrics -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("The Beagle, a puppy!", ["beagle", "puppy"]),
        ("2:40", ["2", "40"]),
        ("26 April 2024", ["2024", "04", "26"]),
        ("the 3rd of June, 2024", ["2024", "06", "03"]),
        ("April 26, 2024", ["2024", "04", "26"]),
        ("said 2024-04-26)", ["said", "2024", "04", "26"]),
        ("In May 2024 we moved", ["in", "2024", "05", "we", "moved"]),
        ("may I ask", ["may", "i", "ask"]),  # a month name without a year stays a word
    ],
)
def test_normalize(text: str, words: list[str]) -> None:
    assert normalize(text) == words


def test_answer_tokens_drop_a_leading_hedge_only() -> None:
    assert answer_tokens("around 26 April 2024") == ["2024", "04", "26"]
    assert answer_tokens("about") == ["about"]  # nothing else left: kept
    assert answer_tokens("a painting of the harbor") == ["painting", "of", "harbor"]


def test_containment_is_a_contiguous_run_of_whole_words() -> None:
    context = normalize("Ana: traded in the old Corolla today (said 2024-05-14)")
    assert contains(context, answer_tokens("old Corolla"))
    assert contains(context, answer_tokens("May 2024"))  # a day of that month
    assert contains(context, answer_tokens("around 14 May 2024"))
    assert not contains(context, answer_tokens("Corolla old"))  # order matters
    assert not contains(context, answer_tokens("old Corol"))  # whole words only
    assert not contains(context, answer_tokens("June 2024"))
    assert not contains(context, [])


def test_token_f1_against_hand_computed_values() -> None:
    assert token_f1(["a", "b", "c"], ["b", "c", "d", "e"]) == pytest.approx(4 / 7)
    assert token_f1(["x", "x", "y"], ["x", "y", "y"]) == pytest.approx(2 / 3)
    assert token_f1(["beagle"], ["beagle"]) == 1.0
    assert token_f1([], ["beagle"]) == 0.0
    assert token_f1(["cat"], ["beagle"]) == 0.0


def test_best_span_on_known_strings() -> None:
    words = normalize("We got a beagle puppy and a tabby kitten last week")
    assert best_span_f1(words, answer_tokens("beagle")) == (1.0, (2, 3))
    # "no vegetarian now" against "... vegetarian since ... no meat": the best span is
    # "vegetarian since no", 2 of 3 words on either side
    f1, (start, end) = best_span_f1(normalize("vegetarian since no meat"), ["no", "vegetarian"])
    assert f1 == pytest.approx(2 * 2 / (3 + 2))
    assert (start, end) == (0, 3)
    assert best_span_f1(words, ["dalmatian"]) == (0.0, (0, 0))


@given(
    st.lists(st.sampled_from("abcde"), max_size=14),
    st.lists(st.sampled_from("abcf"), min_size=1, max_size=4),
)
def test_best_span_is_the_best_of_every_span(context: list[str], gold: list[str]) -> None:
    brute = max(
        (token_f1(context[i:j], gold) for i in range(len(context)) for j in range(i + 1, 15)),
        default=0.0,
    )
    f1, (start, end) = best_span_f1(context, gold)
    assert f1 == pytest.approx(brute)
    assert token_f1(context[start:end], gold) == pytest.approx(f1)


def test_the_span_reader() -> None:
    reader = SpanReader()
    reading = reader.read("What breed?", "Ana: we adopted a beagle puppy", "a beagle")
    assert reading == Reading("beagle", 1.0, True, None)
    partial = reader.read("Who?", "Ana: my sister Maya is a pilot", "airline pilot")
    assert partial.contained is False
    assert partial.f1 == pytest.approx(2 * 1 / (1 + 2))
    assert reader.read("Where?", "anything", None) == Reading("", 0.0, False, None)


# -- contexts and the budget ---------------------------------------------------------------

DAY1 = datetime.datetime(2024, 5, 1, 9, 0)
DAY2 = datetime.datetime(2024, 5, 9, 9, 0)


def message(n: int) -> Message:
    return Message(id=f"m{n}", speaker="Ana", role="user", text=f"message number {n} " * 3)


def sessions() -> list[tuple[Session, Message]]:
    first = Session(id="s1", time=DAY1, messages=tuple(message(n) for n in range(1, 6)))
    second = Session(id="s2", time=DAY2, messages=tuple(message(n) for n in range(6, 11)))
    return [(first, m) for m in first.messages] + [(second, m) for m in second.messages]


def test_history_unlimited_holds_every_message_with_its_session_date() -> None:
    text = history_context(sessions(), None)
    lines = text.splitlines()
    assert lines[0] == "[2024-05-01]"
    assert "[2024-05-09]" in lines
    assert [line for line in lines if not line.startswith("[")] == [
        f"Ana: {message(n).text}" for n in range(1, 11)
    ]


def test_truncation_drops_the_oldest_messages_first() -> None:
    pairs = sessions()
    whole = tokens([history_context(pairs, None)])
    for budget in (whole - 1, whole // 2, 40):
        text = history_context(pairs, budget)
        kept = [line.removeprefix("Ana: ") for line in text.splitlines() if line.startswith("Ana")]
        assert tokens([text]) <= budget
        # a suffix of the conversation: the newest messages, in order
        n = len(kept)
        assert 0 < n < len(pairs)
        assert kept == [m.text for _, m in pairs[len(pairs) - n :]]
        # the largest suffix that fits: one more message would not
        assert tokens([history_context(pairs[len(pairs) - n - 1 :], None)]) > budget
        # the first message kept is under its session's date
        assert text.splitlines()[0] in ("[2024-05-01]", "[2024-05-09]")
    assert history_context(pairs, 2) == ""  # not even one message fits


def test_fit_keeps_the_first_units_of_a_ranked_list() -> None:
    lines = [f"- note {n} " + "word " * 10 for n in range(6)]

    def render(units: Any) -> str:
        return "\n".join(units)

    text = fit(lines, render, 40, keep="first")
    assert text == render(lines[: len(text.splitlines())])
    assert 0 < len(text.splitlines()) < 6
    assert tokens([text]) <= 40
    assert fit(lines, render, None, keep="first") == render(lines)


# -- chat model readers --------------------------------------------------------------------


def test_a_chat_model_reader_is_scored_on_its_answer() -> None:
    model = FakeListChatModel(responses=["Biscuit is a beagle.", "Unknown", "Dublin"])
    reader = reader_from(model)
    assert isinstance(reader, ChatReader)
    first = reader.read("What breed is Biscuit?", "Ana: a beagle named Biscuit", "beagle")
    assert first.answer == "Biscuit is a beagle."
    assert first.contained is True
    assert first.f1 == pytest.approx(2 * (1 / 3) / (1 / 3 + 1))  # biscuit, is, beagle
    assert reader.read("What is the cat called?", "", None).abstained is True
    # a right answer the context never held is scored as given
    assert reader.read("Where?", "", "Dublin").contained is True


def test_a_chat_model_reads_every_condition_and_abstains() -> None:
    model = FakeListChatModel(responses=["unknown"] * 100)
    cuts = (FreshnessCut("end"),)
    report = evaluate_answers(load_dataset(TINY), tiny_settings(sweep=cuts), reader=model)
    assert report.reader == "chat:FakeListChatModel"
    for condition in CONDITIONS:
        metrics = report.metrics[condition]
        assert metrics["no-answer"].abstention == 1.0  # "unknown" to the one it cannot answer
        assert metrics["all"].containment == 0.0  # and to every other one
        assert metrics["all"].f1 == 0.0
    # one call per question, condition and cut
    assert model.i == 5 * (len(CONDITIONS) + len(cuts))


def test_a_reader_names_and_bad_names() -> None:
    assert isinstance(reader_from(None), SpanReader)
    assert isinstance(reader_from("span"), SpanReader)
    custom = SpanReader()
    assert reader_from(custom) is custom
    with pytest.raises(ConfigurationError, match="provider:model"):
        reader_from("gpt-4o")
    # LangChain missing, or the provider unknown to it: one error, no traceback
    with pytest.raises(ConfigurationError, match="nosuchprovider"):
        reader_from("nosuchprovider:some-model")


# -- a whole answer evaluation -------------------------------------------------------------


def tiny_settings(**fields: Any) -> AnswerSettings:
    return AnswerSettings(pipeline=EvalSettings(budget_tokens=150), **fields)


def test_full_history_with_no_budget_contains_every_answer() -> None:
    dataset = load_dataset(TINY)
    report = evaluate_answers(dataset, tiny_settings(budget=None, sweep=()))
    full = report.metrics["full-history"]["all"]
    assert full.containment == 1.0
    assert full.f1 == 1.0
    assert full.answerable == 4
    assert full.questions == 5
    assert full.saving == 0.0
    every = history_context(list(dataset.conversations[0].messages()), None)
    assert {q.conditions["full-history"].tokens for q in report.questions} == {tokens([every])}
    # recall sends fewer tokens than the whole conversation, and says so as a saving
    recalled = report.metrics["recall"]["all"]
    assert recalled.tokens < full.tokens
    assert recalled.saving == pytest.approx(1 - recalled.tokens / full.tokens)
    # the window the node kept is the end of the conversation: it misses the first
    # session's beagle
    by_id = {q.id: q for q in report.questions}
    assert by_id["q1"].conditions["recent-window"].reading.contained is False


def test_a_budget_cuts_the_oldest_facts_out_of_full_history() -> None:
    report = evaluate_answers(load_dataset(TINY), tiny_settings(budget=200, sweep=()))
    by_id = {q.id: q for q in report.questions}
    for question in report.questions:
        assert 0 < question.conditions["full-history"].tokens <= 200
    # the beagle is in the first session, the pilot in the second, the last message in
    # the third: only the newest fit
    assert by_id["q1"].conditions["full-history"].reading.contained is False
    assert by_id["q2"].conditions["full-history"].reading.contained is True


def test_the_sweep_recalls_with_each_cut() -> None:
    cuts = (
        FreshnessCut("end"),
        FreshnessCut("before it all", before_end=datetime.timedelta(days=365)),
        FreshnessCut("a day", max_age=datetime.timedelta(days=1)),
    )
    report = evaluate_answers(load_dataset(TINY), tiny_settings(sweep=cuts))
    for question in report.questions:
        # as of the end is what the recall condition itself recalls
        assert question.sweep["end"] == question.conditions["recall"]
        # a year before the conversation ended nothing was known yet
        assert question.sweep["before it all"].tokens == 0
        assert question.sweep["a day"].tokens <= question.sweep["end"].tokens
    assert report.sweep_metrics["before it all"]["all"].containment == 0.0
    # only the last session is a day old: nothing asked about is in it
    assert report.sweep_metrics["a day"]["all"].containment == 0.0
    assert report.sweep_metrics["end"]["all"].containment == (
        report.metrics["recall"]["all"].containment
    )


class Named(SpanReader):
    name = 'span <&> "reader"'


def test_report_json_table_and_chart() -> None:
    report = evaluate_answers(load_dataset(TINY), tiny_settings(), reader=Named())
    data = report.to_json()
    assert json.loads(json.dumps(data)) == data
    assert data["conditions"] == list(CONDITIONS)
    assert data["reader"] == Named.name
    assert set(data["metrics"]["recall"]) == {
        "all",
        "single-hop",
        "multi-hop",
        "temporal",
        "no-answer",
    }
    assert data["questions"][0]["conditions"]["full-history"]["contained"] in (True, False)
    text = render_answers(report)
    for word in ("CONTAIN", "TOKENS/Q", "SAVING", "summary+recall", "freshness sweep"):
        assert word in text
    svg = answers_chart(report)
    document = xml.dom.minidom.parseString(svg)  # well-formed: the name was escaped
    titles = [t.firstChild.data for t in document.getElementsByTagName("title")]
    assert Named.name in titles[0]
    # a filled and a ringed point per condition, and a legend dot per condition and key
    assert len(document.getElementsByTagName("circle")) == 3 * len(CONDITIONS) + 2


def test_settings_are_checked() -> None:
    with pytest.raises(ConfigurationError, match="budget"):
        AnswerSettings(budget=0)
    with pytest.raises(ConfigurationError, match="conditions"):
        AnswerSettings(conditions=("recall", "telepathy"))
    with pytest.raises(ConfigurationError, match="conditions"):
        AnswerSettings(conditions=("recall", "recall"))
    only = evaluate_answers(load_dataset(TINY), tiny_settings(conditions=("recall",), sweep=()))
    assert only.conditions == ("recall",)
    assert only.metrics["recall"]["all"].saving is None  # no full history to compare with


@pytest.mark.parametrize("split", ["dev", "test"])
def test_every_benchmark_gold_answer_is_in_its_evidence(split: str) -> None:
    """Gold answers are extractive: the evidence messages, as a reader is given them
    (with their session's date), contain each one, so a context holding the evidence
    holds the answer and containment can reach 1."""
    benchmark = Path(__file__).resolve().parents[2] / "benchmarks" / "memory"
    dataset = load_dataset(benchmark / f"{split}.json")
    conversations = {c.id: c for c in dataset.conversations}
    for question in dataset.questions:
        if not question.evidence:
            assert question.answer is None, question.id
            continue
        assert question.answer is not None, question.id
        evidence = [
            (session, m)
            for session, m in conversations[question.conversation].messages()
            if m.id in question.evidence
        ]
        context = normalize(history_context(evidence, None))
        assert contains(context, answer_tokens(question.answer)), question.id

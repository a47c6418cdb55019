"""``statekeeper.memory.eval``: the metrics on hand-computed cases, dataset checks, the BM25
baseline on a toy corpus, and a whole evaluation of a tiny dataset."""

from __future__ import annotations

import copy
import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from statekeeper.errors import ConfigurationError, SerializationError
from statekeeper.memory.eval._baseline import BM25Index, tokenize
from statekeeper.memory.eval._dataset import load_dataset, parse_dataset
from statekeeper.memory.eval._metrics import (
    Outcome,
    aggregate,
    hit_at,
    ndcg_at,
    precision_at,
    reciprocal_rank,
)

TINY = Path(__file__).parent / "data" / "tiny.json"
BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "memory"
T, F = True, False


# -- metrics -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("relevant", "k", "expected"),
    [
        ((F, T, F), 1, 0.0),
        ((F, T, F), 2, 1.0),
        ((T,), 5, 1.0),
        ((), 10, 0.0),
        ((F, F, F, F, F, T), 5, 0.0),
    ],
)
def test_hit_at(relevant: tuple[bool, ...], k: int, expected: float) -> None:
    assert hit_at(relevant, k) == expected


@pytest.mark.parametrize(
    ("relevant", "k", "expected"),
    [
        ((T, F), 10, 1.0),
        ((F, F, T, T), 10, 1 / 3),
        ((F, F, T), 2, 0.0),
        ((), 10, 0.0),
    ],
)
def test_reciprocal_rank(relevant: tuple[bool, ...], k: int, expected: float) -> None:
    assert reciprocal_rank(relevant, k) == pytest.approx(expected)


def test_precision_counts_missing_results_as_misses() -> None:
    assert precision_at((T, F, T), 5) == pytest.approx(2 / 5)
    assert precision_at((T, T, T, T, T, T), 5) == 1.0
    assert precision_at((), 5) == 0.0


def test_ndcg_against_hand_computed_values() -> None:
    # one relevant item at rank 2, one relevant item in the index: (1/log2 3) / 1
    assert ndcg_at((F, T), 10, 1) == pytest.approx(1 / math.log2(3))
    # relevant at ranks 1 and 3, two relevant in the index: (1 + 1/2) / (1 + 1/log2 3)
    assert ndcg_at((T, F, T), 10, 2) == pytest.approx(1.5 / (1 + 1 / math.log2(3)))
    assert ndcg_at((T, T), 10, 2) == 1.0
    # the ideal list is capped at k: 20 relevant items, only 2 slots
    assert ndcg_at((T, T), 2, 20) == 1.0
    assert ndcg_at((F, F), 10, 0) == 0.0


def outcome(relevant: tuple[bool, ...], *, evidence: int = 1, **fields: Any) -> Outcome:
    values: dict[str, Any] = {
        "category": "single-hop" if evidence else "no-answer",
        "relevant": relevant,
        "n_relevant": evidence,
        "evidence": evidence,
        "covered": sum(relevant[:10]) and evidence,
        "tokens": 10 * len(relevant),
    }
    return Outcome(**(values | fields))


def test_aggregate_scores_answerable_questions_and_abstention_apart() -> None:
    metrics = aggregate(
        [
            outcome((T, F)),
            outcome((F, F, T), evidence=2, covered=1),
            outcome(()),  # answerable, nothing returned: a miss everywhere
            outcome((), evidence=0),  # no answer, nothing returned: abstained
            outcome((F, F), evidence=0),  # no answer, two results: did not abstain
        ]
    )
    assert metrics.questions == 5
    assert metrics.answerable == 3
    assert metrics.hit_at_1 == pytest.approx(1 / 3)
    assert metrics.hit_at_3 == pytest.approx(2 / 3)
    assert metrics.mrr_at_10 == pytest.approx((1 + 1 / 3) / 3)
    assert metrics.precision_at_5 == pytest.approx((1 / 5 + 1 / 5) / 3)
    assert metrics.evidence_recall_at_10 == pytest.approx((1 + 1 / 2 + 0) / 3)
    assert metrics.abstention == 0.5
    assert metrics.mean_returned == pytest.approx((2 + 3 + 0 + 0 + 2) / 5)
    assert metrics.mean_tokens == pytest.approx(70 / 5)


def test_aggregate_of_one_kind_leaves_the_other_metrics_empty() -> None:
    only_no_answer = aggregate([outcome((), evidence=0)])
    assert only_no_answer.hit_at_5 is None
    assert only_no_answer.abstention == 1.0
    assert aggregate([outcome((T,))]).abstention is None
    with pytest.raises(ValueError, match="no outcomes"):
        aggregate([])


# -- dataset checks ------------------------------------------------------------------------


def tiny() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(TINY.read_text(encoding="utf-8"))
    return data


def test_the_tiny_dataset_loads() -> None:
    dataset = load_dataset(TINY)
    assert [c.id for c in dataset.conversations] == ["ana"]
    assert {q.category for q in dataset.questions} == {
        "single-hop",
        "multi-hop",
        "temporal",
        "no-answer",
    }


def broken(change: Any) -> dict[str, Any]:
    data = copy.deepcopy(tiny())
    change(data)
    return data


def set_question(index: int, **fields: Any) -> Any:
    return lambda data: data["questions"][index].update(fields)


def first_session(data: dict[str, Any]) -> dict[str, Any]:
    session: dict[str, Any] = data["conversations"][0]["sessions"][0]
    return session


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (set_question(1, conversation="bob"), r"questions\[1\]\.conversation: unknown .*'bob'"),
        (set_question(2, evidence=["m9", "m99"]), r"questions\[2\]\.evidence\[1\]: .*'m99'"),
        (set_question(3, id="q1"), r"questions\[3\]\.id: duplicate question id 'q1'"),
        (set_question(0, evidence=[]), r"questions\[0\]\.evidence: empty"),
        (set_question(4, evidence=["m1"]), r"questions\[4\]\.evidence: 'no-answer'"),
        (set_question(0, evidences=["m1"]), r"questions\[0\]\.evidences: Extra inputs"),
        (
            lambda d: first_session(d).update(time="8 May 2024"),
            r"conversations\[0\]\.sessions\[0\]\.time: Input should be a valid datetime",
        ),
        (
            lambda d: first_session(d).update(time="2024-07-01T00:00:00"),
            r"conversations\[0\]\.sessions\[1\]\.time: .* is before the previous session",
        ),
        (
            lambda d: first_session(d).update(time="2024-05-08T13:56:00+02:00"),
            r"sessions\[1\]\.time: mixes times with and without a UTC offset",
        ),
        (
            lambda d: first_session(d)["messages"][1].update(id="m1"),
            r"sessions\[0\]\.messages\[1\]\.id: duplicate message id 'm1'",
        ),
        (
            lambda d: first_session(d)["messages"][0].update(role="system"),
            r"messages\[0\]\.role: Input should be 'user' or 'assistant'",
        ),
        (
            lambda d: d["conversations"].append(d["conversations"][0]),
            r"conversations\[1\]\.id: duplicate conversation id 'ana'",
        ),
        (lambda d: d.pop("questions"), r"questions: Field required"),
    ],
)
def test_malformed_datasets_name_the_json_path(change: Any, message: str) -> None:
    with pytest.raises(SerializationError, match=message):
        parse_dataset(broken(change))


def test_unreadable_and_non_json_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read dataset"):
        load_dataset(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{conversations: []", encoding="utf-8")
    with pytest.raises(SerializationError, match="is not JSON"):
        load_dataset(bad)


@pytest.mark.parametrize("split", ["dev", "test"])
def test_the_committed_benchmark_splits_are_what_the_generator_makes(split: str) -> None:
    made = subprocess.run(
        [sys.executable, str(BENCHMARK / "make_dataset.py"), "--split", split],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert made == (BENCHMARK / f"{split}.json").read_text(encoding="utf-8")
    dataset = load_dataset(BENCHMARK / f"{split}.json")
    assert 150 <= len(dataset.questions) <= 300
    assert {q.category for q in dataset.questions} == {
        "single-hop",
        "multi-hop",
        "temporal",
        "knowledge-update",
        "no-answer",
    }
    for conversation in dataset.conversations:
        assert 4 <= len(conversation.sessions) <= 8
        assert all(20 <= len(s.messages) <= 60 for s in conversation.sessions)


CALENDAR = {"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"}


def test_the_benchmark_splits_share_no_names_and_no_question() -> None:
    """The test split is held out: its people, places, employers and question wordings
    are none of dev's, so what is tuned on dev's words cannot carry over."""
    dev, test = (load_dataset(BENCHMARK / f"{split}.json") for split in ("dev", "test"))

    def names(dataset: Any) -> set[str]:
        # capitalised words inside a message: people, pets, cities, employers, brands
        return {
            word
            for conversation in dataset.conversations
            for _, message in conversation.messages()
            for word in re.findall(r"(?<=[a-z,] )[A-Z][a-z]+", message.text)
            if word not in CALENDAR
        }

    def users(dataset: Any) -> set[str]:
        return {m.speaker for c in dataset.conversations for _, m in c.messages()} - {"Assistant"}

    assert names(dev).isdisjoint(names(test))
    assert users(dev).isdisjoint(users(test))
    assert {q.question for q in dev.questions}.isdisjoint(q.question for q in test.questions)


# -- the baseline --------------------------------------------------------------------------

CORPUS = [
    "Ana: we adopted a beagle puppy named Biscuit",
    "Assistant: a beagle is a wonderful companion",
    "Ana: my sister lives in Dublin",
    "Ana: the weather is lovely and the park is lovely",
]


def test_tokenize_is_plain() -> None:
    assert tokenize("Ana's BEAGLE, 2 dogs!") == ["ana", "s", "beagle", "2", "dogs"]


def test_bm25_scores_match_the_formula() -> None:
    index = BM25Index(CORPUS)
    n, average = len(CORPUS), sum(len(tokenize(d)) for d in CORPUS) / len(CORPUS)

    def expected(term: str, document: str) -> float:
        words = tokenize(document)
        df = sum(term in tokenize(d) for d in CORPUS)
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        tf = words.count(term)
        return float(idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * len(words) / average)))

    assert index.score("beagle", 0) == pytest.approx(expected("beagle", CORPUS[0]))
    assert index.score("lovely park", 3) == pytest.approx(
        expected("lovely", CORPUS[3]) + expected("park", CORPUS[3])
    )
    assert index.score("Dublin", 0) == 0.0


def test_bm25_search_ranks_returns_matches_only_and_keeps_ties_in_order() -> None:
    index = BM25Index(CORPUS)
    # the shorter document of two with one "beagle" each ranks first
    assert [i for i, _ in index.search("beagle", 10)] == [1, 0]
    assert [i for i, _ in index.search("sister Dublin beagle", 1)] == [2]
    assert index.search("volcano", 10) == []
    assert [i for i, _ in BM25Index(["a b", "a b"]).search("a", 10)] == [0, 1]
    assert BM25Index([]).search("anything", 3) == []


# -- a whole evaluation --------------------------------------------------------------------


def test_evaluate_the_tiny_dataset() -> None:
    from statekeeper.memory.eval import EvalSettings, evaluate, render

    progress: list[tuple[int, int, str]] = []
    report = evaluate(
        load_dataset(TINY),
        EvalSettings(budget_tokens=150),
        progress=lambda done, total, what: progress.append((done, total, what)),
    )
    assert progress == [(1, 1, "ana")]
    [conversation] = report.conversations
    assert conversation.messages == 20
    assert conversation.compactions >= 1  # the budget was crossed while the chat went on
    assert conversation.notes > 0
    assert conversation.context_tokens < conversation.tokens
    assert [q.id for q in report.questions] == ["q1", "q2", "q3", "q4", "q5"]

    by_id = {q.id: q for q in report.questions}
    # the breed question is asked with the dog's name: both systems find the message
    assert any(by_id["q1"].pipeline.relevant)
    assert by_id["q1"].baseline.relevant[0]
    assert by_id["q3"].baseline.n_relevant == 2  # multi-hop: two evidence messages

    metrics = report.metrics
    assert set(metrics["pipeline"]) == {"all", "single-hop", "multi-hop", "temporal", "no-answer"}
    assert metrics["baseline"]["all"].answerable == 4
    assert metrics["baseline"]["no-answer"].hit_at_5 is None
    assert metrics["pipeline"]["no-answer"].abstention is not None

    data = report.to_json()
    assert json.loads(json.dumps(data)) == data
    assert data["settings"]["budget_tokens"] == 150
    assert data["metrics"]["pipeline"]["all"]["questions"] == 5
    text = render(report)
    for word in ("HIT@5", "MRR@10", "pipeline", "baseline", "multi-hop", "compaction"):
        assert word in text


def test_evaluate_refuses_a_store_that_already_holds_the_notes(tmp_path: Path) -> None:
    from statekeeper.memory.eval import EvalSettings, evaluate
    from statekeeper.memory.recall import Limits

    url = f"sqlite:///{tmp_path}/memory.db"
    evaluate(load_dataset(TINY), EvalSettings(budget_tokens=150, store_url=url))
    with pytest.raises(ConfigurationError, match="already holds notes"):
        evaluate(load_dataset(TINY), EvalSettings(budget_tokens=150, store_url=url))
    with pytest.raises(ConfigurationError, match="k must be an integer >= 1"):
        evaluate(load_dataset(TINY), EvalSettings(limits=Limits(k=0)))

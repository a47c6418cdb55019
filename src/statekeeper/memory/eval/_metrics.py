"""Retrieval metrics over one ranked result list, and their means over many questions.

A ranked list is given as relevance flags, best result first: ``(False, True)`` means the
second result is relevant. Relevance is binary.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "MetricSet",
    "Outcome",
    "aggregate",
    "hit_at",
    "ndcg_at",
    "precision_at",
    "reciprocal_rank",
]


def hit_at(relevant: Sequence[bool], k: int) -> float:
    """1.0 when one of the first ``k`` results is relevant, else 0.0."""
    return 1.0 if any(relevant[:k]) else 0.0


def reciprocal_rank(relevant: Sequence[bool], k: int) -> float:
    """1 / the rank of the first relevant result among the first ``k``; 0.0 if none."""
    for rank, flag in enumerate(relevant[:k], start=1):
        if flag:
            return 1.0 / rank
    return 0.0


def precision_at(relevant: Sequence[bool], k: int) -> float:
    """The share of ``k`` slots holding a relevant result (fewer results than ``k``
    count as misses, so returning less is not rewarded)."""
    return sum(relevant[:k]) / k


def ndcg_at(relevant: Sequence[bool], k: int, n_relevant: int) -> float:
    """Normalised discounted cumulative gain of the first ``k`` results: DCG over the DCG
    of an ideal list with ``min(n_relevant, k)`` relevant results first. 0.0 when there
    is nothing relevant to find."""
    ideal = _dcg([True] * min(n_relevant, k))
    return _dcg(relevant[:k]) / ideal if ideal else 0.0


def _dcg(relevant: Sequence[bool]) -> float:
    return sum(1.0 / math.log2(rank + 1) for rank, flag in enumerate(relevant, 1) if flag)


@dataclass(frozen=True)
class Outcome:
    """What one system returned for one question of ``category``.

    ``relevant`` flags the results in rank order; ``n_relevant`` is how many items of the
    index are relevant (for the ideal DCG); ``evidence`` is how many evidence messages the
    question has and ``covered`` how many of them the results include; ``tokens`` is the
    size of the returned texts.
    """

    category: str
    relevant: tuple[bool, ...]
    n_relevant: int
    evidence: int
    covered: int
    tokens: int

    @property
    def answerable(self) -> bool:
        return self.evidence > 0


@dataclass(frozen=True)
class MetricSet:
    """Means over a group of questions. Ranking metrics are over the questions that have
    evidence (``None`` when there are none); ``abstention`` is the share of questions
    without evidence for which nothing was returned (``None`` when there are none);
    ``mean_returned`` and ``mean_tokens`` are over all questions of the group."""

    questions: int
    answerable: int
    hit_at_1: float | None
    hit_at_3: float | None
    hit_at_5: float | None
    hit_at_10: float | None
    mrr_at_10: float | None
    ndcg_at_10: float | None
    precision_at_5: float | None
    evidence_recall_at_10: float | None
    abstention: float | None
    mean_returned: float
    mean_tokens: float


def aggregate(outcomes: Iterable[Outcome]) -> MetricSet:
    """The :class:`MetricSet` of ``outcomes`` (at least one)."""
    every = list(outcomes)
    if not every:
        raise ValueError("no outcomes to aggregate")
    scored = [o for o in every if o.answerable]
    unanswerable = [o for o in every if not o.answerable]

    def mean(values: Iterable[float], over: Sequence[Outcome]) -> float | None:
        return sum(values) / len(over) if over else None

    return MetricSet(
        questions=len(every),
        answerable=len(scored),
        hit_at_1=mean((hit_at(o.relevant, 1) for o in scored), scored),
        hit_at_3=mean((hit_at(o.relevant, 3) for o in scored), scored),
        hit_at_5=mean((hit_at(o.relevant, 5) for o in scored), scored),
        hit_at_10=mean((hit_at(o.relevant, 10) for o in scored), scored),
        mrr_at_10=mean((reciprocal_rank(o.relevant, 10) for o in scored), scored),
        ndcg_at_10=mean((ndcg_at(o.relevant, 10, o.n_relevant) for o in scored), scored),
        precision_at_5=mean((precision_at(o.relevant, 5) for o in scored), scored),
        evidence_recall_at_10=mean((o.covered / o.evidence for o in scored), scored),
        abstention=mean((float(not o.relevant) for o in unanswerable), unanswerable),
        mean_returned=sum(len(o.relevant) for o in every) / len(every),
        mean_tokens=sum(o.tokens for o in every) / len(every),
    )

"""The result of an answer evaluation: per question and condition what was read, the
means per condition and question kind, as data (``to_json``) and as tables."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from statekeeper._console import table
from statekeeper.memory.eval._dataset import NO_ANSWER
from statekeeper.memory.eval._readers import Reading

__all__ = [
    "CONDITIONS",
    "FULL_HISTORY",
    "AnswerMetrics",
    "AnswerReport",
    "QuestionAnswers",
    "Read",
    "aggregate_reads",
    "render_answers",
]

FULL_HISTORY = "full-history"
#: Every condition, in the order the report shows them.
CONDITIONS = (
    FULL_HISTORY,
    "recent-window",
    "summary",
    "summary+recall",
    "recall",
    "bm25-turns",
)
OVERALL = "all"


@dataclass(frozen=True)
class Read:
    """One question under one condition: the ``tokens`` of the context sent and the
    reader's :class:`Reading`."""

    tokens: int
    reading: Reading


@dataclass(frozen=True)
class QuestionAnswers:
    """One question: its ``gold`` answer (``None`` for ``no-answer``) and its
    :class:`Read` under each condition and each cut of the freshness sweep."""

    id: str
    conversation: str
    category: str
    gold: str | None
    conditions: Mapping[str, Read]
    sweep: Mapping[str, Read]

    @property
    def answerable(self) -> bool:
        return self.gold is not None


@dataclass(frozen=True)
class AnswerMetrics:
    """Means over a group of questions under one condition. ``f1`` and ``containment``
    are over the questions with a gold answer (``None`` when there are none);
    ``abstention`` over those without one, when the reader can abstain (``None``
    otherwise); ``tokens`` is the mean context size over every question of the group and
    ``saving`` is ``1 - tokens / full-history tokens`` on the same questions (``None``
    without a full-history condition)."""

    questions: int
    answerable: int
    f1: float | None
    containment: float | None
    abstention: float | None
    tokens: float
    saving: float | None


def aggregate_reads(
    reads: Sequence[tuple[bool, Read]], full_tokens: float | None = None
) -> AnswerMetrics:
    """The :class:`AnswerMetrics` of ``reads`` (``(answerable, read)`` pairs, at least
    one); ``full_tokens`` is the mean full-history context of the same questions."""
    if not reads:
        raise ValueError("no reads to aggregate")
    scored = [read.reading for answerable, read in reads if answerable]
    unanswered = [read.reading for answerable, read in reads if not answerable]
    abstained = [r.abstained for r in unanswered if r.abstained is not None]
    mean_tokens = sum(read.tokens for _, read in reads) / len(reads)
    return AnswerMetrics(
        questions=len(reads),
        answerable=len(scored),
        f1=_mean(r.f1 for r in scored),
        containment=_mean(float(r.contained) for r in scored),
        abstention=_mean(float(a) for a in abstained),
        tokens=mean_tokens,
        saving=1 - mean_tokens / full_tokens if full_tokens else None,
    )


def _mean(values: Iterable[float]) -> float | None:
    every = list(values)
    return sum(every) / len(every) if every else None


@dataclass(frozen=True)
class AnswerReport:
    """What :func:`~statekeeper.memory.eval.evaluate_answers` measured.

    ``metrics[condition][group]`` and ``sweep_metrics[cut][group]`` are
    :class:`AnswerMetrics`, ``group`` ``"all"`` or a question category; the sweep's
    ``saving`` is against full history too.
    """

    settings: Mapping[str, Any]
    reader: str
    conditions: tuple[str, ...]
    cuts: tuple[str, ...]
    questions: tuple[QuestionAnswers, ...]

    @property
    def categories(self) -> list[str]:
        """The question categories, in alphabetical order, ``no-answer`` last."""
        return sorted({q.category for q in self.questions}, key=lambda c: (c == NO_ANSWER, c))

    def _groups(self) -> dict[str, list[QuestionAnswers]]:
        groups = {OVERALL: list(self.questions)}
        for category in self.categories:
            groups[category] = [q for q in self.questions if q.category == category]
        return groups

    def _full(self, questions: Sequence[QuestionAnswers]) -> float | None:
        if FULL_HISTORY not in self.conditions:
            return None
        return sum(q.conditions[FULL_HISTORY].tokens for q in questions) / len(questions)

    @functools.cached_property
    def metrics(self) -> dict[str, dict[str, AnswerMetrics]]:
        groups = self._groups()
        return {
            condition: {
                group: aggregate_reads(
                    [(q.answerable, q.conditions[condition]) for q in questions],
                    self._full(questions),
                )
                for group, questions in groups.items()
            }
            for condition in self.conditions
        }

    @functools.cached_property
    def sweep_metrics(self) -> dict[str, dict[str, AnswerMetrics]]:
        groups = self._groups()
        return {
            cut: {
                group: aggregate_reads(
                    [(q.answerable, q.sweep[cut]) for q in questions], self._full(questions)
                )
                for group, questions in groups.items()
            }
            for cut in self.cuts
        }

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON data (what ``--json`` prints)."""

        def groups(table: Mapping[str, Mapping[str, AnswerMetrics]]) -> dict[str, Any]:
            return {
                name: {group: dataclasses.asdict(m) for group, m in by_group.items()}
                for name, by_group in table.items()
            }

        return {
            "settings": dict(self.settings),
            "reader": self.reader,
            "conditions": list(self.conditions),
            "metrics": groups(self.metrics),
            "sweep": groups(self.sweep_metrics),
            "questions": [
                {
                    "id": q.id,
                    "conversation": q.conversation,
                    "category": q.category,
                    "gold": q.gold,
                    "conditions": {name: _read_json(r) for name, r in q.conditions.items()},
                    "sweep": {name: _read_json(r) for name, r in q.sweep.items()},
                }
                for q in self.questions
            ],
        }


def _read_json(read: Read) -> dict[str, Any]:
    return {"tokens": read.tokens, **dataclasses.asdict(read.reading)}


def render_answers(report: AnswerReport) -> str:
    """The report as terminal tables: answer quality and tokens per condition and
    question kind (overall first), then the freshness sweep of ``recall``."""
    headers = ["category", "condition", "n", "f1", "contain", "abstain", "tokens/q", "saving"]
    rows = []
    for group in [OVERALL, *report.categories]:
        for condition in report.conditions:
            rows.append([group, condition, *_cells(report.metrics[condition][group])])
    lines = [table(headers, rows)]
    if report.cuts:
        kinds = [c for c in report.categories if c != NO_ANSWER]
        sweep_headers = ["recall freshness", "f1", "contain", *kinds, "tokens/q"]
        sweep_rows = []
        for cut in report.cuts:
            by_group = report.sweep_metrics[cut]
            overall = by_group[OVERALL]
            sweep_rows.append(
                [
                    cut,
                    _number(overall.f1),
                    _number(overall.containment),
                    *(_number(by_group[kind].containment) for kind in kinds),
                    _number(overall.tokens),
                ]
            )
        lines += ["", "freshness sweep (recall; per kind: containment)", ""]
        lines.append(table(sweep_headers, sweep_rows))
    budget = report.settings.get("reader_budget")
    lines += [
        "",
        f"reader: {report.reader}; reader budget: "
        f"{'unlimited' if budget is None else f'{budget} tokens'}; "
        f"{sum(q.answerable for q in report.questions)} of {len(report.questions)} "
        "questions have a gold answer",
        "settings: "
        + ", ".join(
            f"{key}={value}"
            for key, value in report.settings.items()
            if key not in ("sweep", "conditions", "reader_budget")
        ),
    ]
    return "\n".join(lines)


def _cells(m: AnswerMetrics) -> list[Any]:
    saving = None if m.saving is None else f"{m.saving:.0%}"
    return [
        m.questions,
        _number(m.f1),
        _number(m.containment),
        _number(m.abstention),
        _number(m.tokens),
        saving,
    ]


def _number(value: float | None) -> str | None:
    if value is None:
        return None
    return f"{value:.1f}" if value >= 10 else f"{value:.3f}"

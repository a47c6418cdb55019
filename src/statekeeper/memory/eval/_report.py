"""The result of an evaluation: what was measured, as data (``to_json``) and as tables."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from statekeeper._console import table
from statekeeper.memory.eval._dataset import NO_ANSWER
from statekeeper.memory.eval._metrics import MetricSet, Outcome, aggregate

__all__ = ["ConversationStats", "EvalReport", "QuestionResult", "render"]

OVERALL = "all"
SYSTEMS = ("pipeline", "baseline")


@dataclass(frozen=True)
class ConversationStats:
    """How one conversation went through the pipeline.

    ``tokens`` is the whole conversation; ``notes``/``note_tokens`` what compaction
    stored; ``window_messages``/``window_tokens`` the messages still in the thread's state
    when the conversation ends (before the final compaction) and ``summary_tokens`` its
    running summary then. ``compactions`` and ``tokens_saved_total`` are that running
    summary's own accounting. All token counts are ``count_tokens_approximately`` of the
    texts as ``"speaker: text"``, one message each.
    """

    id: str
    sessions: int
    messages: int
    tokens: int
    notes: int
    note_tokens: int
    compactions: int
    tokens_saved_total: int
    window_messages: int
    window_tokens: int
    summary_tokens: int

    @property
    def context_tokens(self) -> int:
        """What the model is given at the end instead of the whole conversation."""
        return self.window_tokens + self.summary_tokens


@dataclass(frozen=True)
class QuestionResult:
    """One question: the pipeline's and the baseline's :class:`Outcome`, and whether some
    of its evidence was still in the thread's window (not compacted) at the end."""

    id: str
    conversation: str
    category: str
    in_window: bool
    pipeline: Outcome
    baseline: Outcome


@dataclass(frozen=True)
class EvalReport:
    """Metrics of the pipeline and of the baseline, overall (``"all"``) and per category.

    ``metrics[system][group]`` is a :class:`MetricSet`, ``system`` one of ``"pipeline"``
    and ``"baseline"``, ``group`` ``"all"`` or a question category.
    """

    settings: Mapping[str, Any]
    conversations: tuple[ConversationStats, ...]
    questions: tuple[QuestionResult, ...]

    @property
    def categories(self) -> list[str]:
        """The question categories, in alphabetical order, ``no-answer`` last."""
        return sorted({q.category for q in self.questions}, key=lambda c: (c == NO_ANSWER, c))

    @functools.cached_property
    def metrics(self) -> dict[str, dict[str, MetricSet]]:
        result: dict[str, dict[str, MetricSet]] = {}
        for system in SYSTEMS:
            outcomes = [getattr(q, system) for q in self.questions]
            result[system] = {OVERALL: aggregate(outcomes)} | {
                category: aggregate(o for o in outcomes if o.category == category)
                for category in self.categories
            }
        return result

    @property
    def compaction(self) -> dict[str, float]:
        """Totals over conversations: conversation tokens, the context kept at the end,
        the share saved, and the running summaries' ``tokens_saved_total``."""
        tokens = sum(c.tokens for c in self.conversations)
        context = sum(c.context_tokens for c in self.conversations)
        return {
            "conversation_tokens": tokens,
            "context_tokens": context,
            "saved_share": 1 - context / tokens if tokens else 0.0,
            "tokens_saved_total": sum(c.tokens_saved_total for c in self.conversations),
            "compactions": sum(c.compactions for c in self.conversations),
            "notes": sum(c.notes for c in self.conversations),
            "note_tokens": sum(c.note_tokens for c in self.conversations),
        }

    @property
    def mean_conversation_tokens(self) -> float:
        """Tokens of the whole conversation a question is about, averaged over questions."""
        sizes = {c.id: c.tokens for c in self.conversations}
        return sum(sizes[q.conversation] for q in self.questions) / len(self.questions)

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON data (what ``--json`` prints)."""
        return {
            "settings": dict(self.settings),
            "metrics": {
                system: {group: dataclasses.asdict(m) for group, m in groups.items()}
                for system, groups in self.metrics.items()
            },
            "mean_conversation_tokens": self.mean_conversation_tokens,
            "compaction": self.compaction,
            "conversations": [
                dataclasses.asdict(c) | {"context_tokens": c.context_tokens}
                for c in self.conversations
            ],
            "questions": [
                {
                    "id": q.id,
                    "conversation": q.conversation,
                    "category": q.category,
                    "in_window": q.in_window,
                    **{system: _outcome_json(getattr(q, system)) for system in SYSTEMS},
                }
                for q in self.questions
            ],
        }


def _outcome_json(outcome: Outcome) -> dict[str, Any]:
    return {
        "relevant": list(outcome.relevant),
        "covered": outcome.covered,
        "tokens": outcome.tokens,
    }


_COLUMNS: Sequence[tuple[str, str]] = (
    ("hit@1", "hit_at_1"),
    ("hit@3", "hit_at_3"),
    ("hit@5", "hit_at_5"),
    ("hit@10", "hit_at_10"),
    ("mrr@10", "mrr_at_10"),
    ("ndcg@10", "ndcg_at_10"),
    ("p@5", "precision_at_5"),
    ("ev-rec@10", "evidence_recall_at_10"),
    ("abstain", "abstention"),
    ("items/q", "mean_returned"),
    ("tokens/q", "mean_tokens"),
)


def render(report: EvalReport) -> str:
    """The report as terminal tables: one row per category and system (overall first),
    then the conversations' token accounting."""
    metrics = report.metrics
    rows = []
    for group in [OVERALL, *report.categories]:
        for system in SYSTEMS:
            m = metrics[system][group]
            rows.append(
                [
                    group,
                    system,
                    m.questions,
                    *(_number(getattr(m, field)) for _, field in _COLUMNS),
                ]
            )
    headers = ["category", "system", "n", *(name for name, _ in _COLUMNS)]
    compaction = report.compaction
    in_window = sum(q.in_window for q in report.questions)
    lines = [
        table(headers, rows),
        "",
        f"conversation: {report.mean_conversation_tokens:.0f} tokens on average per question; "
        f"{in_window} of {len(report.questions)} questions have evidence still in the window",
        f"compaction: {compaction['compactions']:.0f} compactions, {compaction['notes']:.0f} "
        f"notes ({compaction['note_tokens']:.0f} tokens); context at the end "
        f"{compaction['context_tokens']:.0f} of {compaction['conversation_tokens']:.0f} "
        f"tokens ({compaction['saved_share']:.0%} saved); "
        f"tokens_saved_total {compaction['tokens_saved_total']:.0f}",
        "settings: " + ", ".join(f"{key}={value}" for key, value in report.settings.items()),
    ]
    return "\n".join(lines)


def _number(value: float | None) -> str | None:
    if value is None:
        return None
    return f"{value:.1f}" if value >= 10 else f"{value:.3f}"

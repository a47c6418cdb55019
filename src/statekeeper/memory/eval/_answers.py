"""Answer-level evaluation: what a reader can answer from what each condition sends it.

Each conversation is played through the pipeline exactly as :func:`evaluate` plays it
(:mod:`statekeeper.memory.eval._play`); then every question is read, by the same reader,
from the context of each condition, built with the code a graph uses
(:func:`~statekeeper.memory.recall.recall`, :func:`~statekeeper.memory.retrieval.format_memories`,
the running summary as :func:`~statekeeper.memory.node.with_summary` words it):

- ``full-history``: every message, oldest dropped first to fit the reader's budget;
- ``recent-window``: the messages the :class:`SummarizationNode` kept in the thread's
  state when the conversation ended (its budget), without the summary;
- ``summary``: the running summary alone, after the final compaction;
- ``summary+recall``: the running summary and the notes recalled for the question;
- ``recall``: the recalled notes alone;
- ``bm25-turns``: the ``k`` raw messages plain BM25 ranks best for the question.

Then the freshness sweep: ``recall`` again with each :class:`FreshnessCut` (``max_age``,
an earlier ``as_of``, ``include_expired``), to show what staleness rules do to answers.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph.store.base import BaseStore

from statekeeper.checkpointers import open_checkpointer
from statekeeper.errors import ConfigurationError
from statekeeper.memory.eval._answer_report import (
    CONDITIONS,
    AnswerReport,
    QuestionAnswers,
    Read,
)
from statekeeper.memory.eval._baseline import BM25Index
from statekeeper.memory.eval._dataset import Conversation, Dataset, Message, Question, Session
from statekeeper.memory.eval._play import Played, play, said, tokens
from statekeeper.memory.eval._readers import Reader, reader_from
from statekeeper.memory.eval._settings import EvalSettings
from statekeeper.memory.notes import aware
from statekeeper.memory.recall import Freshness, Hit, recall
from statekeeper.memory.retrieval import format_memories
from statekeeper.memory.store import open_store

__all__ = [
    "DEFAULT_READER_BUDGET",
    "DEFAULT_SWEEP",
    "AnswerSettings",
    "FreshnessCut",
    "evaluate_answers",
    "fit",
    "history_context",
]

#: The reader's context budget by default: a small model's window, below the dev
#: conversations' ~5,500 tokens, so full history has to drop its oldest messages.
DEFAULT_READER_BUDGET = 4096

SUMMARY_PREFIX = "Summary of the earlier conversation:"  # with_summary()'s own words
MEMORIES_PREFIX = "What you remember:"

Progress = Callable[[int, int, str], None]  # (conversations done, total, conversation id)
_DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class FreshnessCut:
    """One point of the freshness sweep: recall ``as_of`` the conversation's end minus
    ``before_end``, with ``max_age`` and ``include_expired`` as
    :class:`~statekeeper.memory.recall.Freshness` takes them; ``label`` names it in the
    report."""

    label: str
    max_age: datetime.timedelta | None = None
    before_end: datetime.timedelta = datetime.timedelta(0)
    include_expired: bool = False

    def freshness(self, ended: datetime.datetime) -> Freshness:
        """The :class:`Freshness` of this cut for a conversation that ended at ``ended``."""
        return Freshness(
            as_of=ended - self.before_end,
            max_age=self.max_age,
            include_expired=self.include_expired,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "max_age_days": self.max_age / _DAY if self.max_age is not None else None,
            "before_end_days": self.before_end / _DAY,
            "include_expired": self.include_expired,
        }


DEFAULT_SWEEP: tuple[FreshnessCut, ...] = (
    FreshnessCut("as of the end"),
    FreshnessCut("max_age 60d", max_age=60 * _DAY),
    FreshnessCut("max_age 30d", max_age=30 * _DAY),
    FreshnessCut("max_age 14d", max_age=14 * _DAY),
    FreshnessCut("max_age 7d", max_age=7 * _DAY),
    FreshnessCut("include_expired", include_expired=True),
    FreshnessCut("as_of end-14d", before_end=14 * _DAY),
    FreshnessCut("as_of end-28d", before_end=28 * _DAY),
)


@dataclass(frozen=True)
class AnswerSettings:
    """What :func:`evaluate_answers` runs: the pipeline (:class:`EvalSettings`: node,
    recall limits, store), the reader's context ``budget`` in tokens (``None``:
    unlimited), the ``conditions`` compared (a subset of :data:`CONDITIONS`, in order)
    and the freshness ``sweep`` (empty: none).

    Raises:
        ConfigurationError: a budget below 1, an unknown or repeated condition.
    """

    pipeline: EvalSettings = field(default_factory=EvalSettings)
    budget: int | None = DEFAULT_READER_BUDGET
    conditions: tuple[str, ...] = CONDITIONS
    sweep: tuple[FreshnessCut, ...] = DEFAULT_SWEEP

    def __post_init__(self) -> None:
        if self.budget is not None and (
            not isinstance(self.budget, int) or isinstance(self.budget, bool) or self.budget < 1
        ):
            raise ConfigurationError(f"budget must be an integer >= 1 or None, got {self.budget!r}")
        unknown = [c for c in self.conditions if c not in CONDITIONS]
        if unknown or len(set(self.conditions)) != len(self.conditions) or not self.conditions:
            raise ConfigurationError(
                f"conditions must be distinct names among {', '.join(CONDITIONS)}; "
                f"got {', '.join(self.conditions) or 'none'}"
            )

    def to_json(self) -> dict[str, Any]:
        return {
            **self.pipeline.to_json(),
            "reader_budget": self.budget,
            "conditions": list(self.conditions),
            "sweep": [cut.to_json() for cut in self.sweep],
        }


_SETTINGS = AnswerSettings()  # the defaults: frozen, so one serves


def evaluate_answers(
    dataset: Dataset,
    settings: AnswerSettings = _SETTINGS,
    *,
    reader: Reader | Any | str | None = None,
    progress: Progress | None = None,
) -> AnswerReport:
    """Read every question of ``dataset`` from the context of each condition of
    ``settings`` and score the readings (see the module's docstring and
    ``docs/memory-eval.md``).

    ``reader``: ``None`` (the offline :class:`~statekeeper.memory.eval._readers.SpanReader`),
    a ``"provider:model"`` string, a LangChain chat model or any
    :class:`~statekeeper.memory.eval._readers.Reader`. Questions are asked as the
    conversation ends (recall's ``as_of`` is the time of its last session). Every token
    figure is ``count_tokens_approximately`` of the context as one message.
    ``progress(done, total, conversation_id)`` is called after each conversation.

    Raises:
        ConfigurationError: the store already holds notes for one of the conversations,
            or the reader cannot be made.
    """
    read_with = reader_from(reader)
    asked: dict[str, list[Question]] = {}
    for question in dataset.questions:
        asked.setdefault(question.conversation, []).append(question)
    pipeline = settings.pipeline
    results: dict[str, QuestionAnswers] = {}
    with open_checkpointer("memory://") as saver, open_store(pipeline.store_url) as store:
        for done, conversation in enumerate(dataset.conversations, start=1):
            played = play(conversation, saver, store, pipeline.node_options())
            contexts = _Contexts(conversation, played, store, settings)
            for question in asked.get(conversation.id, []):
                results[question.id] = _answers(question, contexts, read_with, settings)
            if progress is not None:
                progress(done, len(dataset.conversations), conversation.id)
    questions = tuple(results[q.id] for q in dataset.questions)
    return AnswerReport(
        settings.to_json(),
        read_with.name,
        settings.conditions,
        tuple(cut.label for cut in settings.sweep),
        questions,
    )


def _answers(
    question: Question, contexts: _Contexts, reader: Reader, settings: AnswerSettings
) -> QuestionAnswers:
    def read(context: str) -> Read:
        reading = reader.read(question.question, context, question.answer)
        return Read(tokens([context]) if context else 0, reading)

    hits = contexts.recalled(question.question, contexts.asked)
    by_condition = {
        condition: read(contexts.of(condition, question.question, hits))
        for condition in settings.conditions
    }
    sweep = {
        cut.label: read(contexts.memories(contexts.recalled(question.question, cut)))
        for cut in settings.sweep
    }
    return QuestionAnswers(
        id=question.id,
        conversation=question.conversation,
        category=question.category,
        gold=question.answer,
        conditions=by_condition,
        sweep=sweep,
    )


class _Contexts:
    """The contexts of one conversation's conditions; those that do not depend on the
    question are built once."""

    def __init__(
        self, conversation: Conversation, played: Played, store: BaseStore, settings: AnswerSettings
    ) -> None:
        self.store, self.played, self.settings = store, played, settings
        self.budget = settings.budget
        self.k = settings.pipeline.limits.k
        self.pairs = list(conversation.messages())
        self.index = BM25Index([said(m) for _, m in self.pairs])
        pipeline = settings.pipeline
        self.asked = Freshness(as_of=played.ended, windows=pipeline.windows, facts=pipeline.facts)
        self.full = history_context(self.pairs, self.budget)
        window = [(s, m) for s, m in self.pairs if m.id in played.live_window]
        self.window = history_context(window, self.budget)
        summary = str(played.final_summary.get("text") or "")
        lines = summary.splitlines()
        self.summary = fit(lines, _titled(SUMMARY_PREFIX), self.budget, keep="last")

    def recalled(self, query: str, freshness: FreshnessCut | Freshness) -> list[Hit]:
        if isinstance(freshness, FreshnessCut):
            freshness = freshness.freshness(self.played.ended)
            pipeline = self.settings.pipeline
            freshness = dataclasses.replace(
                freshness, windows=pipeline.windows, facts=pipeline.facts
            )
        limits = self.settings.pipeline.limits
        return recall(
            self.store, self.played.namespace, query, limits=limits, freshness=freshness, log=False
        )

    def memories(self, hits: Sequence[Hit]) -> str:
        lines = format_memories(hits).splitlines()
        return fit(lines, _titled(MEMORIES_PREFIX), self.budget, keep="first")

    def of(self, condition: str, query: str, hits: Sequence[Hit]) -> str:
        if condition == "full-history":
            return self.full
        if condition == "recent-window":
            return self.window
        if condition == "summary":
            return self.summary
        if condition == "recall":
            return self.memories(hits)
        if condition == "summary+recall":
            parts = [self.summary, self.memories(hits)]
            return fit([p for p in parts if p], "\n\n".join, self.budget, keep="first")
        found = [self.pairs[i] for i, _ in self.index.search(query, self.k)]
        lines = [f"- {said(m)} (said {s.time.date().isoformat()})" for s, m in found]
        return fit(lines, _titled(MEMORIES_PREFIX), self.budget, keep="first")


def _titled(title: str) -> Callable[[Sequence[str]], str]:
    def render(lines: Sequence[str]) -> str:
        return "\n".join([title, *lines]) if lines else ""

    return render


def fit(
    units: Sequence[Any],
    render: Callable[[Sequence[Any]], str],
    budget: int | None,
    *,
    keep: str,
) -> str:
    """``render`` of as many ``units`` as fit in ``budget`` tokens (``None``: all), the
    ``"last"`` ones (the oldest are dropped first) or the ``"first"`` ones (the last,
    least relevant, are dropped first). ``""`` when not even one unit fits.

    The rendered size grows with every unit kept, so the cut is found by bisection."""
    if budget is None or tokens([render(units)]) <= budget:
        return render(units)

    def kept(n: int) -> Sequence[Any]:
        return units[len(units) - n :] if keep == "last" else units[:n]

    low, high = 0, len(units)  # render(kept(low)) fits (or low is 0), kept(high) does not
    while high - low > 1:
        middle = (low + high) // 2
        if tokens([render(kept(middle))]) <= budget:
            low = middle
        else:
            high = middle
    return render(kept(low)) if low else ""


def history_context(pairs: Sequence[tuple[Session, Message]], budget: int | None) -> str:
    """Messages as a reader is given them: ``speaker: text`` lines, each session opened
    by its date (``[2024-04-26]``), cut to ``budget`` tokens by dropping the oldest
    messages first (the session of the first message kept keeps its date line)."""
    return fit(pairs, _history, budget, keep="last")


def _history(pairs: Sequence[tuple[Session, Message]]) -> str:
    lines: list[str] = []
    current: str | None = None
    for session, message in pairs:
        if session.id != current:
            current = session.id
            lines.append(f"[{aware(session.time).date().isoformat()}]")
        lines.append(said(message))
    return "\n".join(lines)

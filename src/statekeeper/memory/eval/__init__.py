"""Measure the memory pipeline on a conversation dataset (``statekeeper memory eval``).

Each conversation is played, turn by turn, through a real LangGraph graph whose one node
is a :class:`~statekeeper.memory.node.SummarizationNode`, on one thread with a checkpointer
and a store, so older turns are compacted into notes as the token budget is crossed. Then
every question about it is asked with :func:`~statekeeper.memory.recall.recall`; a note is
relevant when its provenance names one of the question's evidence messages.

The same questions are asked of a baseline, plain Okapi BM25 over every raw message, and
both are scored with the same metrics (see ``docs/memory-eval.md``)::

    report = evaluate(load_dataset("dev.json"), EvalSettings(budget_tokens=1024))
    print(render(report))

:func:`evaluate_answers` goes one step further: it reads every question, with the offline
:class:`SpanReader` or any LangChain chat model, from the context each condition would
send (full history, recent window, summary, summary + recall, recall, BM25 over turns)
and scores the answers against the gold ones, with a freshness sweep of recall::

    answers = evaluate_answers(load_dataset("dev.json"), AnswerSettings(budget=4096))
    print(render_answers(answers))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from typing_extensions import TypedDict, Unpack

from statekeeper.checkpointers import open_checkpointer
from statekeeper.memory.eval._answer_report import (
    CONDITIONS,
    AnswerMetrics,
    AnswerReport,
    render_answers,
)
from statekeeper.memory.eval._answers import (
    DEFAULT_READER_BUDGET,
    DEFAULT_SWEEP,
    AnswerSettings,
    FreshnessCut,
    evaluate_answers,
)
from statekeeper.memory.eval._baseline import BM25Index
from statekeeper.memory.eval._chart import answers_chart
from statekeeper.memory.eval._dataset import (
    Conversation,
    Dataset,
    Question,
    load_dataset,
    parse_dataset,
)
from statekeeper.memory.eval._metrics import MetricSet, Outcome
from statekeeper.memory.eval._play import Played, play, said, tokens
from statekeeper.memory.eval._readers import ChatReader, Reader, Reading, SpanReader, reader_from
from statekeeper.memory.eval._report import ConversationStats, EvalReport, QuestionResult, render
from statekeeper.memory.eval._settings import DEFAULT_BUDGET_TOKENS, EvalSettings
from statekeeper.memory.notes import Note
from statekeeper.memory.recall import DEFAULT_MIN_SCORE, Freshness, Hit, moved_keywords, recall
from statekeeper.memory.store import open_store
from statekeeper.memory.summarize import Summarizer

__all__ = [
    "CONDITIONS",
    "DEFAULT_BUDGET_TOKENS",
    "DEFAULT_READER_BUDGET",
    "DEFAULT_SWEEP",
    "AnswerMetrics",
    "AnswerReport",
    "AnswerSettings",
    "ChatReader",
    "ConversationStats",
    "Dataset",
    "EvalKeywords",
    "EvalReport",
    "EvalSettings",
    "FreshnessCut",
    "MetricSet",
    "Outcome",
    "QuestionResult",
    "Reader",
    "Reading",
    "SpanReader",
    "answers_chart",
    "evaluate",
    "evaluate_answers",
    "load_dataset",
    "parse_dataset",
    "reader_from",
    "render",
    "render_answers",
]

Progress = Callable[[int, int, str], None]  # (conversations done, total, conversation id)
_SETTINGS = EvalSettings()  # the defaults: frozen, so one serves


class EvalKeywords(TypedDict, total=False):
    """The keywords :func:`evaluate` took before :class:`EvalSettings`; deprecated."""

    budget_tokens: int
    keep_tokens: int | None
    k: int
    min_score: float | None
    store_url: str
    summarizer: Summarizer | None


_MOVED = {
    **{
        name: f"EvalSettings({name}=...)"
        for name in ("budget_tokens", "keep_tokens", "store_url", "summarizer")
    },
    **{name: f"EvalSettings(limits=Limits({name}=...))" for name in ("k", "min_score")},
}


def evaluate(
    dataset: Dataset,
    settings: EvalSettings = _SETTINGS,
    *,
    progress: Progress | None = None,
    **deprecated: Unpack[EvalKeywords],
) -> EvalReport:
    """Play every conversation of ``dataset`` through the pipeline and score both the
    pipeline and the BM25 baseline on every question.

    ``settings`` (:class:`EvalSettings`) configure the :class:`SummarizationNode` and
    :func:`recall`. Each conversation is one thread, named by the conversation's id, on an
    in-memory checkpointer that is discarded; its notes go to the store at
    ``settings.store_url`` under the node's default namespace (``("notes", <id>)``).

    Compaction is measured as the conversation ends: the window the budget kept, the
    running summary and its accounting. Then the window is compacted too (a node with a
    budget of one token; the rules keep the last turn), as when a thread is archived, and
    questions are answered from recalled notes alone; a question whose evidence is in that
    last turn is flagged ``in_window`` (it is not counted as retrieved).

    ``progress(done, total, conversation_id)`` is called after each conversation.

    Deprecated: the keywords of :class:`EvalKeywords` (``budget_tokens``, ``keep_tokens``,
    ``k``, ``min_score``, ``store_url``, ``summarizer``) still work, with a
    ``DeprecationWarning``; each replaces that field of ``settings`` (``min_score=None``:
    recall's ``DEFAULT_MIN_SCORE``).

    Raises:
        ConfigurationError: the store already holds notes for one of the conversations
            (results would mix with an earlier run's), or a deprecated keyword has a value
            its option object refuses.
        TypeError: an unknown keyword.
    """
    if deprecated:
        moved_keywords("evaluate", deprecated, _MOVED)
        settings = _with_keywords(settings, deprecated)
    asked: dict[str, list[Question]] = {}
    for question in dataset.questions:
        asked.setdefault(question.conversation, []).append(question)
    node_options = settings.node_options()
    k = settings.limits.k

    stats: list[ConversationStats] = []
    results: dict[str, QuestionResult] = {}
    with open_checkpointer("memory://") as saver, open_store(settings.store_url) as store:
        for done, conversation in enumerate(dataset.conversations, start=1):
            played = play(conversation, saver, store, node_options)
            stats.append(_stats(conversation, played))
            baseline = _Baseline(conversation)
            for question in asked.get(conversation.id, []):
                hits = recall(
                    store,
                    played.namespace,
                    question.question,
                    limits=settings.limits,
                    freshness=Freshness(
                        as_of=played.ended, windows=settings.windows, facts=settings.facts
                    ),
                )
                results[question.id] = QuestionResult(
                    id=question.id,
                    conversation=conversation.id,
                    category=question.category,
                    in_window=not played.window.isdisjoint(question.evidence),
                    pipeline=_pipeline_outcome(question, hits, played.notes),
                    baseline=baseline.outcome(question, k),
                )
            if progress is not None:
                progress(done, len(dataset.conversations), conversation.id)
    questions = tuple(results[q.id] for q in dataset.questions)
    return EvalReport(settings.to_json(), tuple(stats), questions)


def _with_keywords(settings: EvalSettings, legacy: EvalKeywords) -> EvalSettings:
    """``settings`` with the deprecated keywords ``legacy`` applied."""
    given: dict[str, Any] = dict(legacy)
    limits = settings.limits
    if "k" in given:
        limits = dataclasses.replace(limits, k=given.pop("k"))
    if "min_score" in given:
        floor = given.pop("min_score")
        limits = dataclasses.replace(
            limits, min_score=DEFAULT_MIN_SCORE if floor is None else floor
        )
    return dataclasses.replace(settings, limits=limits, **given)


def _stats(conversation: Conversation, played: Played) -> ConversationStats:
    messages = [m for _, m in conversation.messages()]
    summary_text = played.summary.get("text") or ""
    return ConversationStats(
        id=conversation.id,
        sessions=len(conversation.sessions),
        messages=len(messages),
        tokens=tokens(said(m) for m in messages),
        notes=len(played.notes),
        note_tokens=tokens(n.text for n in played.notes),
        compactions=int(played.summary.get("compactions", 0)),
        tokens_saved_total=int(played.summary.get("tokens_saved_total", 0)),
        window_messages=len(played.live_window),
        window_tokens=tokens(said(m) for m in messages if m.id in played.live_window),
        summary_tokens=tokens([summary_text]) if summary_text else 0,
    )


def _pipeline_outcome(question: Question, hits: Sequence[Hit], notes: Sequence[Note]) -> Outcome:
    """How the recalled ``hits`` score. A session note names every message of its session
    as its source, so its provenance would make it "relevant" to every question about
    that session: it never counts as relevant here (nor in the ideal list of nDCG), only
    its tokens count; what it is worth shows in the answer evaluation."""
    evidence = set(question.evidence)
    sources = [set(hit.provenance.message_ids) for hit in hits]
    statements = [hit.note.unit != "session" for hit in hits]
    return Outcome(
        category=question.category,
        relevant=tuple(
            told and not ids.isdisjoint(evidence)
            for ids, told in zip(sources, statements, strict=True)
        ),
        n_relevant=sum(
            n.unit != "session" and not evidence.isdisjoint(n.provenance.message_ids) for n in notes
        ),
        evidence=len(evidence),
        covered=len(
            evidence.intersection(
                set().union(
                    *(ids for ids, told in zip(sources[:10], statements, strict=False) if told)
                )
            )
        ),
        tokens=tokens(hit.note.text for hit in hits),
    )


class _Baseline:
    """Plain BM25 over the conversation's raw messages, each with its speaker."""

    def __init__(self, conversation: Conversation) -> None:
        self.messages = [m for _, m in conversation.messages()]
        self.index = BM25Index([said(m) for m in self.messages])

    def outcome(self, question: Question, k: int) -> Outcome:
        evidence = set(question.evidence)
        found = [self.messages[i] for i, _ in self.index.search(question.question, k)]
        return Outcome(
            category=question.category,
            relevant=tuple(m.id in evidence for m in found),
            n_relevant=len(evidence),
            evidence=len(evidence),
            covered=len(evidence.intersection(m.id for m in found[:10])),
            tokens=tokens(said(m) for m in found),
        )

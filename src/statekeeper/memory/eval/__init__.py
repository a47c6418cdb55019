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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.messages.utils import count_tokens_approximately
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore
from typing_extensions import TypedDict, Unpack

from statekeeper.checkpointers import open_checkpointer
from statekeeper.errors import ConfigurationError
from statekeeper.memory.eval._baseline import BM25Index
from statekeeper.memory.eval._dataset import (
    Conversation,
    Dataset,
    Message,
    Question,
    load_dataset,
    parse_dataset,
)
from statekeeper.memory.eval._metrics import MetricSet, Outcome
from statekeeper.memory.eval._report import ConversationStats, EvalReport, QuestionResult, render
from statekeeper.memory.node import SummarizationNode, SummaryState, notes_namespace
from statekeeper.memory.notes import Note
from statekeeper.memory.recall import DEFAULT_MIN_SCORE, Hit, Limits, moved_keywords, recall
from statekeeper.memory.store import open_store
from statekeeper.memory.summarize import Summarizer

__all__ = [
    "DEFAULT_BUDGET_TOKENS",
    "ConversationStats",
    "Dataset",
    "EvalKeywords",
    "EvalReport",
    "EvalSettings",
    "MetricSet",
    "Outcome",
    "QuestionResult",
    "evaluate",
    "load_dataset",
    "parse_dataset",
    "render",
]

DEFAULT_BUDGET_TOKENS = 1024
_LIMITS = Limits(k=10)  # the evaluation's default: ten results per question, recall's floor
_PAGE = 500  # notes listed per store request when counting a conversation's notes

Progress = Callable[[int, int, str], None]  # (conversations done, total, conversation id)


@dataclass(frozen=True)
class EvalSettings:
    """What :func:`evaluate` runs: the :class:`SummarizationNode`'s ``budget_tokens``,
    ``keep_tokens`` and ``summarizer`` (``None``: its defaults), the :class:`Limits` of
    :func:`recall` (``k`` bounds the baseline's results too), and the store the notes go
    to (``store_url``). The report's ``settings`` record them."""

    budget_tokens: int = DEFAULT_BUDGET_TOKENS
    keep_tokens: int | None = None
    summarizer: Summarizer | None = None
    limits: Limits = _LIMITS
    store_url: str = "memory://"

    def to_json(self) -> dict[str, Any]:
        """The settings as the report records them: plain JSON, ``filter`` only if set."""
        settings: dict[str, Any] = {
            "budget_tokens": self.budget_tokens,
            "keep_tokens": self.keep_tokens,
            "k": self.limits.k,
            "min_score": self.limits.min_score,
            "store_url": self.store_url,
            "summarizer": self.summarizer.name if self.summarizer is not None else None,
        }
        if self.limits.filter is not None:
            settings["filter"] = dict(self.limits.filter)
        return settings


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


@dataclass(frozen=True)
class _Played:
    """A conversation after it went through the pipeline."""

    namespace: tuple[str, ...]
    notes: tuple[Note, ...]
    live_window: frozenset[str]  # ids of the messages in the thread's state at the end
    window: frozenset[str]  # ... and after the final compaction
    summary: Mapping[str, Any]  # the running summary at the end (before that compaction)


def evaluate(
    dataset: Dataset,
    settings: EvalSettings = EvalSettings(),
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
    node_options: dict[str, Any] = {"budget_tokens": settings.budget_tokens}
    if settings.keep_tokens is not None:
        node_options["keep_tokens"] = settings.keep_tokens
    if settings.summarizer is not None:
        node_options["summarizer"] = settings.summarizer
    k = settings.limits.k

    stats: list[ConversationStats] = []
    results: dict[str, QuestionResult] = {}
    with open_checkpointer("memory://") as saver, open_store(settings.store_url) as store:
        for done, conversation in enumerate(dataset.conversations, start=1):
            played = _play(conversation, saver, store, node_options)
            stats.append(_stats(conversation, played))
            baseline = _Baseline(conversation)
            for question in asked.get(conversation.id, []):
                hits = recall(store, played.namespace, question.question, limits=settings.limits)
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


def _play(
    conversation: Conversation,
    saver: BaseCheckpointSaver[Any],
    store: BaseStore,
    node_options: Mapping[str, Any],
) -> _Played:
    thread_id = conversation.id
    namespace = notes_namespace(thread_id)
    if store.search(namespace, limit=1):
        raise ConfigurationError(
            f"the store already holds notes under {namespace!r}; evaluate into an empty store"
        )
    config: Any = {"configurable": {"thread_id": thread_id}}
    graph = _graph(SummarizationNode(**node_options), saver, store)
    for turn in _turns(conversation):
        update: SummaryState = {"messages": turn}
        graph.invoke(update, config)
    live = graph.get_state(config).values
    # The conversation is over: compact what the budget kept too, as when a thread is
    # archived, so that every question is answered from memory alone.
    flush = SummarizationNode(**{**node_options, "budget_tokens": 1, "keep_tokens": 0})
    _graph(flush, saver, store).invoke({"messages": []}, config)
    final = graph.get_state(config).values
    return _Played(
        namespace=namespace,
        notes=tuple(_notes(store, namespace)),
        live_window=_ids(live),
        window=_ids(final),
        summary=live.get("summary") or {},
    )


def _graph(node: SummarizationNode, saver: BaseCheckpointSaver[Any], store: BaseStore) -> Any:
    builder = StateGraph(SummaryState)
    builder.add_node("summarize", node)
    builder.add_edge(START, "summarize")
    builder.add_edge("summarize", END)
    return builder.compile(checkpointer=saver, store=store)


def _ids(values: Mapping[str, Any]) -> frozenset[str]:
    return frozenset(m.id for m in values.get("messages", []) if m.id)


def _turns(conversation: Conversation) -> Iterator[list[AnyMessage]]:
    """The conversation as the graph receives it: one invocation per turn (a user's
    message(s) and the replies that follow), the way a chat agent runs."""
    turn: list[AnyMessage] = []
    for session, message in conversation.messages():
        if turn and message.role == "user" and turn[-1].type == "ai":
            yield turn
            turn = []
        kind = HumanMessage if message.role == "user" else AIMessage
        turn.append(
            kind(
                message.text,
                id=message.id,
                name=message.speaker,
                additional_kwargs={"timestamp": session.time.isoformat()},
            )
        )
    if turn:
        yield turn


def _notes(store: BaseStore, namespace: tuple[str, ...]) -> Iterator[Note]:
    offset = 0
    while True:
        page = store.search(namespace, limit=_PAGE, offset=offset)
        for item in page:
            yield Note.from_value(item.value)
        if len(page) < _PAGE:
            return
        offset += _PAGE


def _tokens(texts: Iterable[str]) -> int:
    """Tokens of ``texts``, each counted as one message: the unit of every token figure."""
    return count_tokens_approximately(list(texts))


def _said(message: Message) -> str:
    return f"{message.speaker}: {message.text}"


def _stats(conversation: Conversation, played: _Played) -> ConversationStats:
    messages = [m for _, m in conversation.messages()]
    summary_text = played.summary.get("text") or ""
    return ConversationStats(
        id=conversation.id,
        sessions=len(conversation.sessions),
        messages=len(messages),
        tokens=_tokens(_said(m) for m in messages),
        notes=len(played.notes),
        note_tokens=_tokens(n.text for n in played.notes),
        compactions=int(played.summary.get("compactions", 0)),
        tokens_saved_total=int(played.summary.get("tokens_saved_total", 0)),
        window_messages=len(played.live_window),
        window_tokens=_tokens(_said(m) for m in messages if m.id in played.live_window),
        summary_tokens=_tokens([summary_text]) if summary_text else 0,
    )


def _pipeline_outcome(question: Question, hits: Sequence[Hit], notes: Sequence[Note]) -> Outcome:
    evidence = set(question.evidence)
    sources = [set(hit.provenance.message_ids) for hit in hits]
    return Outcome(
        category=question.category,
        relevant=tuple(not ids.isdisjoint(evidence) for ids in sources),
        n_relevant=sum(not evidence.isdisjoint(n.provenance.message_ids) for n in notes),
        evidence=len(evidence),
        covered=len(evidence.intersection(set().union(*sources[:10]))),
        tokens=_tokens(hit.note.text for hit in hits),
    )


class _Baseline:
    """Plain BM25 over the conversation's raw messages, each with its speaker."""

    def __init__(self, conversation: Conversation) -> None:
        self.messages = [m for _, m in conversation.messages()]
        self.index = BM25Index([_said(m) for m in self.messages])

    def outcome(self, question: Question, k: int) -> Outcome:
        evidence = set(question.evidence)
        found = [self.messages[i] for i, _ in self.index.search(question.question, k)]
        return Outcome(
            category=question.category,
            relevant=tuple(m.id in evidence for m in found),
            n_relevant=len(evidence),
            evidence=len(evidence),
            covered=len(evidence.intersection(m.id for m in found[:10])),
            tokens=_tokens(_said(m) for m in found),
        )

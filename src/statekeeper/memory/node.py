"""``SummarizationNode``: keep a conversation's state within a token budget.

>>> builder.add_node("summarize", SummarizationNode(budget_tokens=2000))  # doctest: +SKIP
>>> SummarizationNode(budget_tokens=2000, notes=NoteOptions(namespace=("notes",)))  # doctest: +SKIP

When the ``messages`` of the state count more than ``budget_tokens``, the node compresses
the oldest messages into a running summary (a plain-JSON :class:`RunningSummary` in the
state) and into notes with provenance (written to a LangGraph ``BaseStore``), and removes
them from the state with ``RemoveMessage``, so the checkpointed history and the cost of
each turn stop growing. See ``docs/memory.md``.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NotRequired

from langchain_core.messages import BaseMessage, RemoveMessage, SystemMessage
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_store
from langgraph.graph import MessagesState
from langgraph.store.base import BaseStore
from typing_extensions import TypedDict, Unpack

from statekeeper.errors import ConfigurationError
from statekeeper.memory._conversation import (
    TokenCounter,
    checked_messages,
    checked_summary,
    choose_cut,
    message_time,
)
from statekeeper.memory._units.sessions import (
    SESSION_SUMMARIZER,
    latest_session,
    session_notes,
)
from statekeeper.memory.conflicts import ConflictPolicy, PolicyName, resolve_policy, write_notes
from statekeeper.memory.metrics import CompactionEvent, log_compaction
from statekeeper.memory.notes import Note, Provenance, checked_namespace, notes_namespace
from statekeeper.memory.recall import moved_keywords, picked
from statekeeper.memory.summarize import ExtractiveSummarizer, NoteDraft, Summarizer

__all__ = [
    "NoteOptions",
    "RunningSummary",
    "StateOptions",
    "SummarizationKeywords",
    "SummarizationNode",
    "SummaryState",
    "checkpoint_id_of",
    "graph_store",
    "notes_namespace",
    "with_summary",
]

logger = logging.getLogger(__name__)

Namespace = tuple[str, ...] | Callable[[RunnableConfig], tuple[str, ...]]


# typing_extensions' TypedDict: pydantic states need it before Python 3.12
class RunningSummary(TypedDict):
    """The summary of everything compressed so far, and the accounting of the last
    compaction. Only plain JSON types, so it reloads from any checkpointer and serializer
    (including under ``LANGGRAPH_STRICT_MSGPACK=true``) with no registered type.

    Token counts are the node's ``token_counter``'s: ``tokens_before`` and
    ``tokens_after`` count the state's messages before and after the last compaction,
    ``summary_tokens`` the summary as one system message. ``tokens_saved`` is what a
    model call that sends the messages and the summary saves: the old messages and old
    summary minus the kept messages and new summary; ``tokens_saved_total`` sums it over
    every compaction of the thread.
    """

    text: str
    summarizer: str  # who made the last summary: "extractive/4"
    compactions: int
    messages_summarized: int  # over every compaction
    tokens_before: int
    tokens_after: int
    summary_tokens: int
    tokens_saved: int
    tokens_saved_total: int
    note_keys: list[str]  # the store keys of the notes the last compaction wrote
    notes_namespace: list[str] | None  # where they are; None when notes are disabled
    checkpoint_id: str | None  # the checkpoint whose messages were compressed
    updated_at: str  # ISO 8601


class SummaryState(MessagesState):
    """``MessagesState`` with the ``summary`` channel the node writes."""

    summary: NotRequired[RunningSummary]


def checkpoint_id_of(config: RunnableConfig) -> str | None:
    """The id of the checkpoint a node runs on: its state is that checkpoint's.

    Inside a task LangGraph sets ``configurable["checkpoint_id"]`` to ``None`` and records
    the checkpoint of each enclosing graph in ``configurable["checkpoint_map"]``, keyed by
    that graph's namespace: the task's ``checkpoint_ns`` without its last ``|``-separated
    part (``""`` for the root graph). An explicit ``checkpoint_id`` (a direct call) wins.
    ``None`` without a checkpointer.
    """
    configurable = config.get("configurable") or {}
    explicit = configurable.get("checkpoint_id")
    if explicit:
        return str(explicit)
    namespace = str(configurable.get("checkpoint_ns") or "")
    parent = namespace.rpartition("|")[0]
    found = (configurable.get("checkpoint_map") or {}).get(parent)
    return str(found) if found else None


def with_summary(
    messages: Sequence[BaseMessage],
    summary: RunningSummary | None,
    *,
    prefix: str = "Summary of the earlier conversation:",
) -> list[BaseMessage]:
    """``messages`` with the running summary inserted as a system message after the
    leading system messages: what to send a chat model. ``messages`` unchanged (as a new
    list) when there is no summary yet."""
    if not summary or not summary["text"]:
        return list(messages)
    start = 0
    while start < len(messages) and isinstance(messages[start], SystemMessage):
        start += 1
    note = SystemMessage(f"{prefix}\n{summary['text']}")
    return [*messages[:start], note, *messages[start:]]


def graph_store(store: BaseStore | None, owner: str, purpose: str) -> BaseStore:
    """``store`` when given, else the running graph's store (``compile(store=...)``): the
    store a memory node works with.

    Raises:
        ConfigurationError: neither exists; the message names ``owner`` and ``purpose``.
    """
    if store is not None:
        return store
    try:
        found = get_store()
    except RuntimeError:  # called outside a graph run
        found = None
    if found is None:
        raise ConfigurationError(
            f"{owner} has no store {purpose}: compile the graph with store=..., or pass "
            "store=... to the node"
        )
    return found


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass(frozen=True)
class NoteOptions:
    """How a :class:`SummarizationNode` writes its notes.

    ``namespace``: a tuple, or a function of the run's config; ``None`` (default) for
    :func:`notes_namespace` of the thread. ``conflict_policy`` resolves a note that states
    a new value of a fact already noted in the namespace (same ``(subject, attribute)``):
    ``"latest_wins"`` (default: the older note is superseded, kept and linked),
    ``"keep_both_flagged"`` or any :class:`~statekeeper.memory.conflicts.ConflictPolicy`;
    nothing is ever deleted. ``clock`` gives the time stamped on the notes
    (``created_at``), and on the running summary and the compaction's log entry.
    ``session_gap``: messages said less than this apart are one session, of which one
    note is written beside the statements' notes (who, topics, dates; provenance to all
    of its messages; a session cut by a compaction keeps one note, told again as it goes
    on); ``None`` writes none. See :mod:`statekeeper.memory._units.sessions`.

    Raises:
        ConfigurationError: a ``namespace`` that is not a store namespace (non-empty
            ``str`` labels without ``.`` or NUL), an unknown ``conflict_policy``, a
            ``clock`` not callable, or a ``session_gap`` not ``None`` nor positive.
    """

    namespace: Namespace | None = None
    conflict_policy: ConflictPolicy | PolicyName = "latest_wins"
    clock: Callable[[], datetime.datetime] = _utcnow
    session_gap: datetime.timedelta | None = datetime.timedelta(hours=1)

    def __post_init__(self) -> None:
        if self.namespace is not None and not callable(self.namespace):
            checked_namespace(self.namespace)
        resolve_policy(self.conflict_policy)
        if not callable(self.clock):
            raise ConfigurationError(f"clock must be a function, not {self.clock!r}")
        gap = self.session_gap
        if gap is not None and (
            not isinstance(gap, datetime.timedelta) or gap <= datetime.timedelta(0)
        ):
            raise ConfigurationError(
                f"session_gap must be a positive timedelta or None, not {gap!r}"
            )


@dataclass(frozen=True)
class StateOptions:
    """How a :class:`SummarizationNode` reads and writes the graph state: the channel of
    the messages (``messages_key``), the channel of its :class:`RunningSummary`
    (``summary_key``), and the ``token_counter`` that measures messages, the unit of
    ``budget_tokens``, ``keep_tokens`` and every count in the summary."""

    messages_key: str = "messages"
    summary_key: str = "summary"
    token_counter: TokenCounter = count_tokens_approximately

    def __post_init__(self) -> None:
        for key in (self.messages_key, self.summary_key):
            if not isinstance(key, str) or not key:
                raise ConfigurationError(f"a state channel's name must be text, not {key!r}")
        if not callable(self.token_counter):
            raise ConfigurationError(f"token_counter must be a function: {self.token_counter!r}")


class SummarizationKeywords(TypedDict, total=False):
    """The keywords :class:`SummarizationNode` took before its option objects; deprecated."""

    token_counter: TokenCounter
    namespace: Namespace | None
    messages_key: str
    summary_key: str
    now: Callable[[], datetime.datetime]
    conflict_policy: ConflictPolicy | PolicyName


_MOVED = {
    **{name: f"notes=NoteOptions({name}=...)" for name in ("namespace", "conflict_policy")},
    "now": "notes=NoteOptions(clock=...)",
    **{
        name: f"state=StateOptions({name}=...)"
        for name in ("messages_key", "summary_key", "token_counter")
    },
}


class SummarizationNode:
    """A graph node that keeps ``state[messages_key]`` within ``budget_tokens``.

    When the messages count more than ``budget_tokens`` (by ``token_counter``), the node
    compresses the oldest ones, keeps the most recent ones verbatim (as many as fit in
    ``keep_tokens``, half the budget by default) and returns an update that

    - removes the compressed messages (``RemoveMessage`` for each, applied by
      ``add_messages``);
    - replaces ``state[summary_key]`` with a new :class:`RunningSummary`, made by
      ``summarizer`` from the compressed messages and the previous summary; it is
      refreshed on every compaction;
    - after writing the summarizer's notes, each a :class:`~statekeeper.memory.notes.Note`
      with provenance, to the store under ``namespace``.

    It never breaks the conversation: leading system messages are kept; the kept window
    starts with a ``HumanMessage``; an AI tool call and its tool results are compressed or
    kept together; only messages with ids are compressed. When no cut satisfies these
    rules, the node returns an empty update and calls no summarizer (so the summarizer is
    never called with no messages). When no cut keeps ``keep_tokens``, it compresses as
    much as the rules allow, so the messages left count at most ``budget_tokens`` whenever
    some valid cut achieves that.

    ``store``: a ``BaseStore``; ``None`` (default) for the graph's store
    (``compile(store=...)``), raising :class:`~statekeeper.errors.ConfigurationError` at
    run time if there is none; ``False`` to write no notes. Notes need the thread id
    (``config["configurable"]["thread_id"]``). Notes are written before the update is
    returned: if the step is retried they are written again under the same keys (a note's
    key derives from its thread, messages and text), keeping the validity and links they
    got the first time.

    ``notes`` (:class:`NoteOptions`): the notes' namespace, conflict policy and clock.
    ``state`` (:class:`StateOptions`): the state's channels and the token counter.

    Deprecated: the keywords of :class:`SummarizationKeywords` (``token_counter``,
    ``namespace``, ``messages_key``, ``summary_key``, ``now``, ``conflict_policy``) still
    work, with a ``DeprecationWarning``; each replaces that field of ``notes`` or
    ``state`` (``now`` is ``notes.clock``).

    Raises:
        ConfigurationError: an argument of the wrong type, a budget below 1,
            ``keep_tokens`` outside ``[0, budget_tokens]``, or ``store`` neither a store,
            ``None`` nor ``False``.
        TypeError: an unknown keyword.
    """

    def __init__(
        self,
        *,
        budget_tokens: int,
        keep_tokens: int | None = None,
        summarizer: Summarizer | None = None,
        store: BaseStore | Literal[False] | None = None,
        notes: NoteOptions = NoteOptions(),
        state: StateOptions = StateOptions(),
        **deprecated: Unpack[SummarizationKeywords],
    ) -> None:
        if deprecated:
            moved_keywords("SummarizationNode", deprecated, _MOVED)
            given: dict[str, Any] = dict(deprecated)
            if "now" in given:
                given["clock"] = given.pop("now")
            notes = dataclasses.replace(notes, **picked(given, NoteOptions))
            state = dataclasses.replace(state, **picked(given, StateOptions))
        for name, value, kind, said in (
            ("budget_tokens", budget_tokens, int, "an int"),
            ("keep_tokens", keep_tokens, int | None, "an int or None"),
            ("summarizer", summarizer, Summarizer | None, "a Summarizer or None"),
            ("notes", notes, NoteOptions, "a NoteOptions"),
            ("state", state, StateOptions, "a StateOptions"),
        ):
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ConfigurationError(f"{name} must be {said}, not {value!r}")
        keep = budget_tokens // 2 if keep_tokens is None else keep_tokens
        if budget_tokens < 1 or not 0 <= keep <= budget_tokens:
            raise ConfigurationError(
                f"need budget_tokens >= 1 and 0 <= keep_tokens <= budget_tokens, got "
                f"budget_tokens={budget_tokens}, keep_tokens={keep_tokens}"
            )
        if store is not None and store is not False and not isinstance(store, BaseStore):
            raise ConfigurationError(f"store must be a BaseStore, None or False, not {store!r}")
        self.budget_tokens = budget_tokens
        self.keep_tokens = keep
        self.summarizer: Summarizer = summarizer or ExtractiveSummarizer()
        self.store = store
        self.notes = notes
        self.state = state
        # the options' fields, flat: what the node reads on every call
        self.token_counter = state.token_counter
        self.namespace = notes.namespace
        self.messages_key = state.messages_key
        self.summary_key = state.summary_key
        self.now = notes.clock
        self.conflict_policy = resolve_policy(notes.conflict_policy)

    def __call__(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        """The state update: empty when the messages are within budget or nothing can be
        compressed; else the removals and the new running summary (notes already stored)."""
        where = f"SummarizationNode: state[{self.messages_key!r}]"
        messages = checked_messages(self._read(state, self.messages_key, required=True), where)
        where = f"SummarizationNode: state[{self.summary_key!r}]"
        previous = checked_summary(self._read(state, self.summary_key), where, RunningSummary)
        tokens_before = self.token_counter(messages)
        if tokens_before <= self.budget_tokens:
            return {}
        cut = choose_cut(messages, self.keep_tokens, self.token_counter)
        if cut is None:
            logger.debug("over budget, but no message can be compressed without breaking a rule")
            return {}
        compressed = messages[cut.start : cut.end]
        kept = messages[: cut.start] + messages[cut.end :]
        summary = self.summarizer.summarize(compressed, previous["text"] if previous else None)
        made_by = summary.summarizer or self.summarizer.name
        now = self.now()
        checkpoint_id = checkpoint_id_of(config)

        note_keys: list[str] = []
        namespace: tuple[str, ...] | None = None
        store = self._resolve_store()
        if store is not None:
            thread_id = _thread_id(config)
            namespace = self._namespace(config, thread_id)
            notes = _notes(summary.notes, compressed, thread_id, checkpoint_id, now, made_by)
            if self.notes.session_gap is not None:
                base = Provenance(
                    thread_id=thread_id,
                    message_ids=(),
                    checkpoint_id=checkpoint_id,
                    created_at=now,
                    summarizer=SESSION_SUMMARIZER,
                )
                # the session the previous compaction ended in: the last note it wrote
                last = previous["note_keys"][-1] if previous and previous["note_keys"] else None
                notes += session_notes(
                    compressed,
                    notes,
                    gap=self.notes.session_gap,
                    base=base,
                    latest=latest_session(store, namespace, last),
                )
            write_notes(store, namespace, notes, policy=self.conflict_policy)
            note_keys = [note.key for note in notes]

        tokens_after = self.token_counter(kept)
        summary_tokens = self.token_counter([SystemMessage(summary.text)]) if summary.text else 0
        saved = tokens_before - tokens_after - summary_tokens
        if previous:
            saved += previous["summary_tokens"]
        running = RunningSummary(
            text=summary.text,
            summarizer=made_by,
            compactions=(previous["compactions"] if previous else 0) + 1,
            messages_summarized=(previous["messages_summarized"] if previous else 0)
            + len(compressed),
            tokens_before=tokens_before,
            tokens_after=tokens_after,
            summary_tokens=summary_tokens,
            tokens_saved=saved,
            tokens_saved_total=(previous["tokens_saved_total"] if previous else 0) + saved,
            note_keys=note_keys,
            notes_namespace=list(namespace) if namespace is not None else None,
            checkpoint_id=checkpoint_id,
            updated_at=now.isoformat(),
        )
        if store is not None:
            thread_id = _thread_id(config)
            log_compaction(
                store,
                CompactionEvent(now, thread_id, tokens_before, tokens_after, summary_tokens, saved),
            )
        removals = [RemoveMessage(id=message.id) for message in compressed if message.id]
        return {self.messages_key: removals, self.summary_key: running}

    def _read(self, state: Any, key: str, *, required: bool = False) -> Any:
        if isinstance(state, Mapping):
            if key in state:
                return state[key]
        elif hasattr(state, key):
            return getattr(state, key)
        if required:
            raise ConfigurationError(f"SummarizationNode: the state has no {key!r} channel")
        return None

    def _resolve_store(self) -> BaseStore | None:
        if self.store is False:
            return None
        return graph_store(
            self.store, "SummarizationNode", "for its notes (store=False keeps only the summary)"
        )

    def _namespace(self, config: RunnableConfig, thread_id: str) -> tuple[str, ...]:
        if self.namespace is None:
            return notes_namespace(thread_id)
        namespace: Any = self.namespace(config) if callable(self.namespace) else self.namespace
        return checked_namespace(tuple(namespace) if type(namespace) is list else namespace)

    def __repr__(self) -> str:
        return (
            f"SummarizationNode(budget_tokens={self.budget_tokens}, "
            f"keep_tokens={self.keep_tokens}, summarizer={self.summarizer.name!r})"
        )


def _thread_id(config: RunnableConfig) -> str:
    thread_id = (config.get("configurable") or {}).get("thread_id")
    if thread_id is None or thread_id == "":
        raise ConfigurationError(
            "SummarizationNode needs config['configurable']['thread_id'] to give its notes "
            "provenance (or store=False to write no notes)"
        )
    return str(thread_id)


def _notes(
    drafts: Sequence[NoteDraft],
    compressed: Sequence[BaseMessage],
    thread_id: str,
    checkpoint_id: str | None,
    now: datetime.datetime,
    made_by: str,
) -> list[Note]:
    """Each draft as a note with provenance, in order, without duplicates. Message ids
    that are not among ``compressed`` are dropped; a draft left with none is about all of
    ``compressed``."""
    by_id = {message.id: message for message in compressed if message.id}
    notes: dict[str, Note] = {}
    for draft in drafts:
        if not draft.text.strip():
            continue
        ids = tuple(dict.fromkeys(i for i in draft.message_ids if i in by_id)) or tuple(by_id)
        times = [t for t in (message_time(by_id[i]) for i in ids) if t is not None]
        provenance = Provenance(
            thread_id=thread_id,
            message_ids=ids,
            checkpoint_id=checkpoint_id,
            said_from=times[0] if times else None,
            said_to=times[-1] if times else None,
            created_at=now,
            summarizer=made_by,
        )
        subject, attribute = draft.fact or (None, None)
        note = Note(
            text=draft.text,
            provenance=provenance,
            topics=draft.topics,
            subject=subject,
            attribute=attribute,
            dates=draft.dates,
        )
        notes.setdefault(note.key, note)
    return list(notes.values())

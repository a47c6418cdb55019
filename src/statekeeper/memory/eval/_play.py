"""How a conversation of the dataset goes through the memory pipeline: one LangGraph graph
per conversation, invoked once per turn, whose one node is a
:class:`~statekeeper.memory.node.SummarizationNode`. Shared by the retrieval evaluation
and the answer evaluation, so both measure the same notes and the same summary."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.messages.utils import count_tokens_approximately
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore

from statekeeper.errors import ConfigurationError
from statekeeper.memory.eval._dataset import Conversation, Message
from statekeeper.memory.node import NoteOptions, SummarizationNode, SummaryState, notes_namespace
from statekeeper.memory.notes import Note, aware

__all__ = ["Played", "play", "said", "tokens"]

_PAGE = 500  # notes listed per store request when reading a conversation's notes


@dataclass(frozen=True)
class Played:
    """A conversation after it went through the pipeline.

    ``live_window`` holds the ids of the messages in the thread's state when the
    conversation ends, and ``summary`` the running summary then; ``window`` and
    ``final_summary`` are the same after the final compaction (the thread archived).
    ``ended`` is the time of the last session (timezone-aware): the moment the questions
    are asked."""

    namespace: tuple[str, ...]
    notes: tuple[Note, ...]
    live_window: frozenset[str]
    window: frozenset[str]
    summary: Mapping[str, Any]
    final_summary: Mapping[str, Any]
    ended: datetime.datetime


class _TurnClock:
    """The time of the turn being played: what the node stamps on its notes
    (``created_at``), so that notes are made when they would have been, in the
    conversation's own time, and ``as_of`` a moment of the conversation sees only them."""

    def __init__(self, start: datetime.datetime) -> None:
        self.at = start

    def __call__(self) -> datetime.datetime:
        return self.at


def play(
    conversation: Conversation,
    saver: BaseCheckpointSaver[Any],
    store: BaseStore,
    node_options: Mapping[str, Any],
) -> Played:
    """Play ``conversation`` on the thread named by its id: one graph invocation per turn,
    then one more with a one-token budget (the thread archived: what the budget kept is
    compacted too, the node's rules keeping the last turn).

    Raises:
        ConfigurationError: the store already holds notes for this conversation (results
            would mix with an earlier run's).
    """
    thread_id = conversation.id
    namespace = notes_namespace(thread_id)
    if store.search(namespace, limit=1):
        raise ConfigurationError(
            f"the store already holds notes under {namespace!r}; evaluate into an empty store"
        )
    clock = _TurnClock(aware(conversation.sessions[0].time))
    options = {**node_options, "notes": NoteOptions(clock=clock)}
    config: Any = {"configurable": {"thread_id": thread_id}}
    graph = _graph(SummarizationNode(**options), saver, store)
    for when, turn in _turns(conversation):
        clock.at = when
        update: SummaryState = {"messages": turn}
        graph.invoke(update, config)
    live = graph.get_state(config).values
    flush = SummarizationNode(**{**options, "budget_tokens": 1, "keep_tokens": 0})
    _graph(flush, saver, store).invoke({"messages": []}, config)
    final = graph.get_state(config).values
    return Played(
        namespace=namespace,
        notes=tuple(_notes(store, namespace)),
        live_window=_ids(live),
        window=_ids(final),
        summary=live.get("summary") or {},
        final_summary=final.get("summary") or {},
        ended=clock.at,
    )


def _graph(node: SummarizationNode, saver: BaseCheckpointSaver[Any], store: BaseStore) -> Any:
    builder = StateGraph(SummaryState)
    builder.add_node("summarize", node)
    builder.add_edge(START, "summarize")
    builder.add_edge("summarize", END)
    return builder.compile(checkpointer=saver, store=store)


def _ids(values: Mapping[str, Any]) -> frozenset[str]:
    return frozenset(m.id for m in values.get("messages", []) if m.id)


def _turns(conversation: Conversation) -> Iterator[tuple[datetime.datetime, list[AnyMessage]]]:
    """The conversation as the graph receives it: one invocation per turn (a user's
    message(s) and the replies that follow), the way a chat agent runs, with the time of
    its session."""
    turn: list[AnyMessage] = []
    when = aware(conversation.sessions[0].time)
    for session, message in conversation.messages():
        if turn and message.role == "user" and turn[-1].type == "ai":
            yield when, turn
            turn = []
        when = aware(session.time)
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
        yield when, turn


def _notes(store: BaseStore, namespace: tuple[str, ...]) -> Iterator[Note]:
    offset = 0
    while True:
        page = store.search(namespace, limit=_PAGE, offset=offset)
        for item in page:
            yield Note.from_value(item.value)
        if len(page) < _PAGE:
            return
        offset += _PAGE


def tokens(texts: Iterable[str]) -> int:
    """Tokens of ``texts``, each counted as one message: the unit of every token figure."""
    return count_tokens_approximately(list(texts))


def said(message: Message) -> str:
    """A message as every token count and every baseline sees it: ``speaker: text``."""
    return f"{message.speaker}: {message.text}"

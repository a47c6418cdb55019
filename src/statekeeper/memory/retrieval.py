"""Retrieval in a graph: a node that recalls notes into the state for the next model call,
and :func:`format_memories` to put them in a prompt.

>>> builder.add_node("recall", RetrievalNode(namespace=("users", "{user_id}")))  # doctest: +SKIP
>>> RetrievalNode(limits=Limits(k=3), freshness=Freshness(half_life=WEEK))  # doctest: +SKIP
>>> prompt = f"What you remember:\\n{format_memories(state['memories'])}"  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.store.base import BaseStore
from typing_extensions import TypedDict, Unpack

from statekeeper.errors import ConfigurationError
from statekeeper.memory.node import graph_store, notes_namespace
from statekeeper.memory.recall import (
    Clock,
    Freshness,
    Hit,
    Limits,
    RecallLog,
    moved_keywords,
    picked,
    recall,
)

__all__ = [
    "Namespace",
    "RetrievalKeywords",
    "RetrievalNode",
    "format_memories",
    "last_human_text",
]

Namespace = tuple[str, ...] | Callable[[RunnableConfig], tuple[str, ...]]

_FIELD = re.compile(r"\{(\w+)\}")


class RetrievalKeywords(TypedDict, total=False):
    """The keywords :class:`RetrievalNode` took before its option objects; deprecated."""

    k: int
    min_score: float
    filter: Mapping[str, Any] | None
    include_expired: bool
    max_age: datetime.timedelta | None
    half_life: datetime.timedelta | None
    now: Clock


_LIMITS, _FRESHNESS = Limits(), Freshness()  # the defaults: frozen, so one of each serves

_MOVED = {
    **{name: f"limits=Limits({name}=...)" for name in ("k", "min_score", "filter")},
    **{
        name: f"freshness=Freshness({name}=...)"
        for name in ("include_expired", "max_age", "half_life")
    },
    "now": "freshness=Freshness(clock=...)",
}


class RetrievalNode:
    """A LangGraph node: recall the notes relevant to the conversation and put them in the
    state under ``key``, as plain JSON dicts (:meth:`Hit.to_dict
    <statekeeper.memory.recall.Hit.to_dict>`: ``text``, ``score``, ``provenance``,
    ``conflicts``...), best first: ``{key: [...]}``, an empty list when
    nothing is relevant. Dicts, not objects, so a checkpoint holding them reloads under
    any serializer, ``LANGGRAPH_STRICT_MSGPACK=true`` included.

    ``store``: a ``BaseStore``; ``None`` (default) for the graph's (``compile(store=...)``).
    ``namespace``: a tuple whose labels may name run settings, ``("users", "{user_id}")``
    being filled from ``config["configurable"]`` (values have ``%``, ``.`` and NUL
    percent-encoded, as in :func:`~statekeeper.memory.node.notes_namespace`); or a
    function of the run's config; by default the thread's notes namespace, where
    :class:`~statekeeper.memory.node.SummarizationNode` writes. ``("notes",)`` recalls the
    notes of every thread. ``query``: a function of the state giving the text to recall
    for; by default the text of the last human message in ``state["messages"]``.

    ``limits`` (how many notes, how relevant, which items) and ``freshness`` (as of when,
    what age does) are :func:`~statekeeper.memory.recall.recall`'s; with
    ``freshness.as_of`` left ``None``, notes are recalled as of ``freshness.clock()`` at
    each call. Each recall is logged for the run's thread.

    Deprecated: the keywords of :class:`RetrievalKeywords` (``k``, ``min_score``,
    ``filter``, ``include_expired``, ``max_age``, ``half_life``, ``now``) still work, with
    a ``DeprecationWarning``; each replaces that field of ``limits`` or ``freshness``
    (``now`` is ``freshness.clock``).

    Raises: :class:`~statekeeper.errors.ConfigurationError` when ``store`` is not a store
    or ``key`` not a state key, or (when called) when there is no store, or the namespace
    names a setting the run's config does not have; ``TypeError`` for an unknown keyword.
    """

    def __init__(
        self,
        *,
        namespace: Namespace | None = None,
        store: BaseStore | None = None,
        query: Callable[[Any], str | None] | None = None,
        key: str = "memories",
        limits: Limits = _LIMITS,
        freshness: Freshness = _FRESHNESS,
        **deprecated: Unpack[RetrievalKeywords],
    ) -> None:
        if deprecated:
            moved_keywords("RetrievalNode", deprecated, _MOVED)
            given: dict[str, Any] = dict(deprecated)
            if "now" in given:
                given["clock"] = given.pop("now")
            limits = dataclasses.replace(limits, **picked(given, Limits))
            freshness = dataclasses.replace(freshness, **picked(given, Freshness))
        if store is not None and not isinstance(store, BaseStore):
            raise ConfigurationError(f"store must be a BaseStore or None, not {store!r}")
        if not isinstance(key, str) or not key:
            raise ConfigurationError(f"key must be a state key (non-empty text), got {key!r}")
        self.namespace = namespace
        self.store = store
        self.query = query
        self.key = key
        self.limits = limits
        self.freshness = freshness

    def __call__(self, state: Any, config: RunnableConfig) -> dict[str, list[dict[str, Any]]]:
        text = self.query(state) if self.query is not None else last_human_text(state)
        if not text or not text.strip():
            return {self.key: []}
        hits = recall(
            self._store(),
            self._namespace(config),
            text,
            limits=self.limits,
            freshness=self.freshness,
            log=RecallLog(thread_id=config.get("configurable", {}).get("thread_id")),
        )
        return {self.key: [hit.to_dict() for hit in hits]}

    def _store(self) -> BaseStore:
        return graph_store(self.store, "RetrievalNode", "to recall from")

    def _namespace(self, config: RunnableConfig) -> tuple[str, ...]:
        configurable = config.get("configurable") or {}
        if self.namespace is None:
            if "thread_id" not in configurable:
                raise ConfigurationError(
                    "RetrievalNode recalls the thread's notes by default, but the run has no "
                    'thread_id; pass {"configurable": {"thread_id": ...}} or a namespace'
                )
            return notes_namespace(str(configurable["thread_id"]))
        if callable(self.namespace):
            namespace = self.namespace(config)
        else:
            namespace = tuple(_fill(label, configurable) for label in self.namespace)
        if not isinstance(namespace, tuple) or not all(isinstance(s, str) for s in namespace):
            raise ConfigurationError(f"a namespace is a tuple of strings, got {namespace!r}")
        return namespace

    def __repr__(self) -> str:
        return f"RetrievalNode(namespace={self.namespace!r}, k={self.limits.k}, key={self.key!r})"


def last_human_text(state: Any) -> str | None:
    """The text of the last human message in ``state["messages"]`` (a dict or an object
    with a ``messages`` attribute); ``None`` when there is none."""
    messages = (
        state.get("messages") if isinstance(state, Mapping) else getattr(state, "messages", None)
    )
    for message in reversed(list(messages or ())):
        if isinstance(message, BaseMessage):
            if message.type == "human":
                return message.text
        elif isinstance(message, Mapping) and message.get("role") in ("user", "human"):
            return _text(message.get("content"))
        elif (
            isinstance(message, Sequence) and len(message) == 2 and message[0] in ("user", "human")
        ):
            return _text(message[1])
    return None


def format_memories(memories: Iterable[Hit | Mapping[str, Any]]) -> str:
    """Recalled notes as prompt lines, best first: ``- <text> (thread <id>, <when>)``,
    where ``<when>`` is the day (or days) the source messages were said, else the day the
    note was made; ``, superseded`` is added to a note a later one replaced, and
    ``, contradicted by another note`` to a note flagged as conflicting, so the model can
    weigh them. Takes :class:`~statekeeper.memory.recall.Hit`\\ s or the dicts
    :class:`RetrievalNode` puts in the state; ``""`` for none."""
    lines = []
    for memory in memories:
        data = memory.to_dict() if isinstance(memory, Hit) else memory
        provenance = data.get("provenance") or {}
        marks = "".join(
            mark
            for mark, present in (
                (", superseded", data.get("superseded_by")),
                (", contradicted by another note", data.get("conflicts")),
            )
            if present
        )
        lines.append(
            f"- {data['text']} (thread {provenance.get('thread_id')}, {_when(provenance)}{marks})"
        )
    return "\n".join(lines)


def _when(provenance: Mapping[str, Any]) -> str:
    said_from, said_to = _day(provenance.get("said_from")), _day(provenance.get("said_to"))
    if said_from and said_to and said_to != said_from:
        return f"said {said_from} to {said_to}"
    if said_from:
        return f"said {said_from}"
    return f"noted {_day(provenance.get('created_at')) or 'at an unknown date'}"


def _day(stamp: Any) -> str | None:
    # ISO 8601 text (what to_dict() gives) or a datetime: the calendar day it names
    return str(stamp)[:10] if stamp else None


def _fill(label: str, configurable: Mapping[str, Any]) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in configurable:
            raise ConfigurationError(
                f"the namespace label {label!r} needs config['configurable'][{name!r}], "
                "which this run does not have"
            )
        text = str(configurable[name])
        return text.replace("%", "%25").replace(".", "%2E").replace("\x00", "%00")

    return _FIELD.sub(value, label)


def _text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            block if isinstance(block, str) else str(block.get("text", ""))
            for block in content
            if isinstance(block, str)
            or (isinstance(block, Mapping) and block.get("type") == "text")
        ]
        return "".join(parts)
    return None

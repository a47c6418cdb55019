"""Recall: the notes relevant to a query, best first, each with its score and provenance.

Relevance first: :func:`recall` returns at most ``k`` notes and only those scoring at least
``min_score`` — possibly none. It never fills the list with whatever else is stored, as
LangGraph's ``InMemoryStore`` does (without an index it ignores the query and returns
items in insertion order). Scores are the normalised relevance of ``docs/memory-store.md``.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from langgraph.store.base import BaseStore, Item

from statekeeper.errors import ConfigurationError, SerializationError
from statekeeper.memory._lexical import score_texts
from statekeeper.memory._sqlite_store_values import indexed_texts
from statekeeper.memory.notes import NOTE_KIND, Note, Provenance

__all__ = ["DEFAULT_MIN_SCORE", "Hit", "recall"]

#: The relevance floor. Measured on a hand-labelled set of 40 notes of one person's memory
#: and 67 queries (38 questions, 12 chat turns, 17 about nothing stored): at 0.3 lexical
#: recall keeps 86% of the relevant notes at 86% precision, the best F1 of the floors
#: tried, and it is the lowest floor at which no unrelated query gets a note. On the dev
#: split of ``benchmarks/memory`` it beats raw-message BM25 on Hit@5 and MRR with about a
#: third of its tokens. See ``docs/memory-store.md``.
DEFAULT_MIN_SCORE = 0.3

_PAGE = 100  # items per request when a store has to be read page by page


@dataclass(frozen=True)
class Hit:
    """A recalled note, its relevance ``score`` in [0, 1], and where it is stored."""

    note: Note
    score: float
    key: str
    namespace: tuple[str, ...]

    @property
    def provenance(self) -> Provenance:
        """Where the note came from: thread, messages, checkpoint, dates, summarizer."""
        return self.note.provenance

    def to_dict(self) -> dict[str, Any]:
        """The hit as plain JSON data (strings, numbers, lists, dicts, ``None``): safe in
        graph state under any serializer, including strict msgpack."""
        return {
            "text": self.note.text,
            "topics": list(self.note.topics),
            "score": self.score,
            "key": self.key,
            "namespace": list(self.namespace),
            "provenance": self.provenance.model_dump(mode="json"),
        }


def recall(
    store: BaseStore,
    namespace: tuple[str, ...],
    query: str,
    *,
    k: int = 5,
    min_score: float = DEFAULT_MIN_SCORE,
    filter: Mapping[str, Any] | None = None,
    as_of: datetime.datetime | None = None,
) -> list[Hit]:
    """The notes under ``namespace`` (a prefix: sub-namespaces included) relevant to
    ``query``: at most ``k``, each scoring at least ``min_score`` (and above 0), best
    first (equal scores keep the store's order). Possibly none; never padded; a blank
    query recalls nothing.

    Works with any LangGraph store. A statekeeper store scores the query itself; any
    other store is read whole under ``namespace`` (page by page) and its notes are scored
    here with the same lexical formula. Items that are not notes are skipped.

    ``filter`` narrows the items as in ``store.search``; ``as_of`` (timezone-aware) keeps
    only notes made at or before it: what the agent could have known then.

    Raises:
        ConfigurationError: ``k`` < 1, ``min_score`` outside [0, 1], ``query`` not text,
            or ``as_of`` without a timezone.
    """
    if not isinstance(query, str):
        raise ConfigurationError(f"the query must be text, got {query!r}")
    check_options(k, min_score)
    if as_of is not None and (
        not isinstance(as_of, datetime.datetime) or as_of.utcoffset() is None
    ):
        raise ConfigurationError(f"as_of must be a timezone-aware datetime, got {as_of!r}")
    if not query.strip():
        return []
    conditions = {**(filter or {}), "kind": NOTE_KIND}
    if getattr(store, "relevance_scores", False) is True:
        return _from_scores(store, namespace, query, k, min_score, conditions, as_of)
    notes = [(item, note) for item in _all(store, namespace, conditions) if (note := _note(item))]
    texts = ("\n".join(text for _, text in indexed_texts(item.value, None)) for item, _ in notes)
    scored = sorted(zip(score_texts(query, texts), notes, strict=True), key=lambda pair: -pair[0])
    return [
        Hit(note, score, item.key, item.namespace)
        for score, (item, note) in scored
        if score >= min_score and score > 0.0 and _known_by(note, as_of)
    ][:k]


def _from_scores(
    store: BaseStore,
    namespace: tuple[str, ...],
    query: str,
    k: int,
    min_score: float,
    conditions: dict[str, Any],
    as_of: datetime.datetime | None,
) -> list[Hit]:
    # Results come best first, so the first score below the floor ends the search.
    hits: list[Hit] = []
    offset = 0
    while True:
        page = store.search(namespace, query=query, filter=conditions, limit=_PAGE, offset=offset)
        for item in page:
            score = item.score or 0.0
            if score < min_score or score <= 0.0:
                return hits
            note = _note(item)
            if note is not None and _known_by(note, as_of):
                hits.append(Hit(note, score, item.key, item.namespace))
                if len(hits) == k:
                    return hits
        if len(page) < _PAGE:
            return hits
        offset += _PAGE


def _all(
    store: BaseStore, namespace: tuple[str, ...], conditions: dict[str, Any]
) -> Iterator[Item]:
    offset = 0
    while True:
        page = store.search(namespace, filter=conditions, limit=_PAGE, offset=offset)
        yield from page
        if len(page) < _PAGE:
            return
        offset += _PAGE


def _note(item: Item) -> Note | None:
    try:
        return Note.from_value(item.value)
    except SerializationError:
        return None  # not a note, or one this statekeeper cannot read: not recallable


def _known_by(note: Note, as_of: datetime.datetime | None) -> bool:
    if as_of is None:
        return True
    made = note.provenance.created_at
    # a note written without a timezone is taken to be in UTC, as statekeeper writes them
    return (made if made.tzinfo is not None else made.replace(tzinfo=datetime.UTC)) <= as_of


def check_options(k: object, min_score: object) -> None:
    """Refuse a ``k`` below 1 or a ``min_score`` outside [0, 1] (ConfigurationError)."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ConfigurationError(f"k must be an integer >= 1, got {k!r}")
    if (
        not isinstance(min_score, int | float)
        or isinstance(min_score, bool)
        or not (math.isfinite(min_score) and 0.0 <= min_score <= 1.0)
    ):
        raise ConfigurationError(f"min_score must be a number in [0, 1], got {min_score!r}")

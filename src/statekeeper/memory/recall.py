"""Recall: the notes relevant to a query, best first, each with its score and provenance.

Relevance first: :func:`recall` returns at most ``k`` notes and only those scoring at least
``min_score`` — possibly none. It never fills the list with whatever else is stored, as
LangGraph's ``InMemoryStore`` does (without an index it ignores the query and returns
items in insertion order). Scores are the normalised relevance of ``docs/memory-store.md``.

Then time: only notes that hold at the moment asked about (``as_of``, by default now) are
recalled, so a superseded or expired note is not; ``max_age`` drops notes said too long
ago, and ``half_life`` ranks recent notes above older ones of equal relevance. A question
naming a time window ("last week", "in March") ranks the notes said in it first
(``Freshness.windows``), and ``Limits.hops`` adds a bounded second round for questions
whose answer is one note away from the notes they name (multi-hop).

The knobs come in frozen option objects, :class:`Limits` (how many notes, how relevant,
which items) and :class:`Freshness` (the moment, what age does), shared with
:class:`~statekeeper.memory.retrieval.RetrievalNode`, and :class:`RecallLog`::

    recall(store, ns, query, limits=Limits(k=3), freshness=Freshness(as_of=last_week))
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from langgraph.store.base import BaseStore, Item
from typing_extensions import TypedDict, Unpack

from statekeeper.errors import ConfigurationError, SerializationError
from statekeeper.memory._units.facts import AskedFact, asked_fact, predecessors
from statekeeper.memory._units.ranking import Decay, Window
from statekeeper.memory._units.sessions import asks_what_was_said
from statekeeper.memory.metrics import RecallEvent, log_recall, overlap, previous_keys
from statekeeper.memory.notes import NOTE_KIND, Note, Provenance
from statekeeper.memory.store.lexical import score_texts
from statekeeper.memory.store.query import (
    DEFAULT_MIN_SCORE,
    Clock,
    Freshness,
    Hops,
    Limits,
    hop_query,
    merge_hops,
    time_window,
)
from statekeeper.memory.store.values import indexed_texts, matches_filter

__all__ = [
    "DEFAULT_MIN_SCORE",
    "Clock",
    "Freshness",
    "Hit",
    "Hops",
    "Limits",
    "RecallKeywords",
    "RecallLog",
    "recall",
]

logger = logging.getLogger(__name__)

_LIMITS, _FRESHNESS = Limits(), Freshness()  # the defaults: frozen, so one of each serves
_PAGE = 100  # items per request when a store has to be read page by page


@dataclass(frozen=True)
class RecallLog:
    """What a recall's log entry (a :class:`~statekeeper.memory.metrics.RecallEvent`) says
    beyond the recall itself: the thread it served, if any."""

    thread_id: str | None = None


@dataclass(frozen=True)
class Hit:
    """A recalled note, its relevance ``score`` in [0, 1], and where it is stored.

    ``freshness`` in (0, 1] is the recency weight recall ranked it by (``score *
    freshness``): 1 unless recall was given a ``half_life``.
    """

    note: Note
    score: float
    key: str
    namespace: tuple[str, ...]
    freshness: float = 1.0

    @property
    def provenance(self) -> Provenance:
        """Where the note came from: thread, messages, checkpoint, dates, summarizer."""
        return self.note.provenance

    @property
    def conflicts(self) -> tuple[str, ...]:
        """The keys of the notes this one contradicts while both stand (the
        ``keep_both_flagged`` policy); empty when it conflicts with none."""
        return self.note.conflicts_with

    def to_dict(self) -> dict[str, Any]:
        """The hit as plain JSON data (strings, numbers, lists, dicts, ``None``): safe in
        graph state under any serializer, including strict msgpack."""
        note = self.note.model_dump(mode="json")
        return {
            "text": self.note.text,
            "topics": list(self.note.topics),
            "score": self.score,
            "freshness": self.freshness,
            "key": self.key,
            "namespace": list(self.namespace),
            "provenance": note["provenance"],
            "observed_at": note["observed_at"],
            "valid_from": note["valid_from"],
            "valid_to": note["valid_to"],
            "subject": note["subject"],
            "attribute": note["attribute"],
            "superseded_by": note["superseded_by"],
            "conflicts": list(self.conflicts),
            "unit": note["unit"],
            "dates": note["dates"],
        }


class RecallKeywords(TypedDict, total=False):
    """The keywords :func:`recall` took before its option objects; deprecated."""

    k: int
    min_score: float
    filter: Mapping[str, Any] | None
    as_of: datetime.datetime | None
    include_expired: bool
    max_age: datetime.timedelta | None
    half_life: datetime.timedelta | None
    clock: Clock
    thread_id: str | None


_RECALL_MOVED = {
    **{name: f"limits=Limits({name}=...)" for name in ("k", "min_score", "filter")},
    **{
        name: f"freshness=Freshness({name}=...)"
        for name in ("as_of", "include_expired", "max_age", "half_life", "clock")
    },
    "thread_id": "log=RecallLog(thread_id=...)",
}


def recall(
    store: BaseStore,
    namespace: tuple[str, ...],
    query: str,
    *,
    limits: Limits = _LIMITS,
    freshness: Freshness = _FRESHNESS,
    log: RecallLog | bool = True,
    **deprecated: Unpack[RecallKeywords],
) -> list[Hit]:
    """The notes under ``namespace`` (a prefix: sub-namespaces included) relevant to
    ``query``: at most ``limits.k``, each scoring at least ``limits.min_score`` (and above
    0), best first (equal scores keep the store's order). Possibly none; never padded; a
    blank query recalls nothing.

    Works with any LangGraph store. A statekeeper store scores the query itself; any
    other store is read whole under ``namespace`` (page by page) and its notes are scored
    here with the same lexical formula. Items that are not notes are skipped.

    ``limits.filter`` narrows the items as in ``store.search``. Time: ``freshness.as_of``
    (timezone-aware; by default ``freshness.clock()``) selects what was known and held
    then:

    - only notes made at or before ``as_of`` (``created_at``);
    - only notes valid at ``as_of`` (``valid_from <= as_of < valid_to``, an open
      ``valid_to`` holding forever): a note superseded by a later one, or expired, is
      recalled only with an ``as_of`` in its validity window, or with
      ``include_expired=True``, which lifts this rule alone;
    - with ``max_age``, only notes said (``observed_at``) at most ``max_age`` before
      ``as_of``;
    - with ``half_life``, notes are ranked by ``score * 0.5 ** (age / half_life)``, where
      age is ``as_of - observed_at`` (0 if negative); the floor still applies to the
      relevance ``score``, so decay reorders relevant notes but never turns an old,
      relevant note away. Each hit carries its weight as ``freshness``;
    - with ``freshness.windows`` (the default), a query naming a time window ("last
      week", "in March 2024", "on 2024-04-26", "two weeks ago": see
      :mod:`statekeeper.memory.store.query`), resolved against ``as_of``, ranks the
      relevant notes said in it (``observed_at``) before the others, which still follow.

    With ``limits.hops`` (a :class:`Hops`), the names in the first round's best hits are
    searched for in a second round, under the same rules, and a few of the notes found
    fill the places the first round left of ``k``, scored no higher than its last hit.

    With ``log`` (``True``, the default, or a :class:`RecallLog` naming the thread served),
    the recall is recorded in the store as a
    :class:`~statekeeper.memory.metrics.RecallEvent` stamped ``freshness.clock()``: how
    many notes came back, how many matching ones the floor dropped from the best ``k``,
    how many relevant ones were stale (expired, superseded or too old), the top score and
    the overlap with the previous recall of the same query; ``memory_stats`` aggregates
    them. A failure to record is logged as a warning and does not fail the recall.
    ``log=False`` records nothing.

    Deprecated: the keywords of :class:`RecallKeywords` (``k``, ``min_score``, ``filter``,
    ``as_of``, ``include_expired``, ``max_age``, ``half_life``, ``clock``, ``thread_id``)
    still work, with a ``DeprecationWarning``; each replaces that field of ``limits``,
    ``freshness`` or ``log``.

    Raises:
        ConfigurationError: ``query`` is not text, the clock's time has no timezone, or a
            deprecated keyword has a value its option object refuses.
        TypeError: an unknown keyword.
    """
    if not isinstance(query, str):
        raise ConfigurationError(f"the query must be text, got {query!r}")
    if deprecated:
        moved_keywords("recall", deprecated, _RECALL_MOVED)
        given: dict[str, Any] = dict(deprecated)
        limits = dataclasses.replace(limits, **picked(given, Limits))
        freshness = dataclasses.replace(freshness, **picked(given, Freshness))
        if "thread_id" in given and log:  # as before: log=False records nothing
            log = RecallLog(thread_id=given["thread_id"])
    window = Window(freshness.moment(), freshness.include_expired)
    named = time_window(query, window.at) if freshness.windows else None
    asked = asked_fact(query) if freshness.facts else None
    overview = named is not None and asks_what_was_said(query, named.phrase)
    weigh = Decay(window.at, freshness.max_age, freshness.half_life, named, asked, overview)
    if not query.strip():
        return []
    conditions = {**(limits.filter or {}), "kind": NOTE_KIND}
    search = _Search(namespace, query, limits.k, limits.min_score, conditions, window, weigh)
    hits = _round(store, search)
    if asked is not None:
        hits = _keyed(store, search, hits, asked)
    if overview:
        hits = _sessions(store, search, hits)
    elif limits.hops is not None and hits:
        hits = _hopped(store, search, hits, limits.hops)
    if log:
        thread_id = log.thread_id if isinstance(log, RecallLog) else None
        _log(store, search, thread_id, freshness.clock, hits)
    return hits


def moved_keywords(function: str, given: Mapping[str, object], moved: Mapping[str, str]) -> None:
    """Warn (``DeprecationWarning``, at the caller of ``function``) that the keywords
    ``given`` moved into option objects, naming where each went (``moved``), as Python
    would refuse any other keyword (``TypeError``)."""
    unknown = sorted(set(given) - set(moved))
    if unknown:
        raise TypeError(f"{function}() got an unexpected keyword argument {unknown[0]!r}")
    if given:
        advice = "; ".join(f"{name}=... -> {moved[name]}" for name in given)
        warnings.warn(
            f"{function}(): keyword arguments moved into option objects, the old ones are "
            f"deprecated and will be removed: {advice}",
            DeprecationWarning,
            stacklevel=3,
        )


def picked(given: Mapping[str, Any], options: type[Any]) -> dict[str, Any]:
    """The entries of ``given`` named like a field of the dataclass ``options``."""
    return {f.name: given[f.name] for f in dataclasses.fields(options) if f.name in given}


@dataclass
class _Search:
    """One recall: what is asked, what is admitted, and what was left out (the tally)."""

    namespace: tuple[str, ...]
    query: str
    k: int
    min_score: float
    conditions: dict[str, Any]
    window: Window
    weigh: Decay
    below_floor: int = 0  # matching notes the floor turned away
    stale: int = 0  # relevant notes expired, superseded or too old at as_of

    def admits(self, note: Note) -> bool:
        return self.window.admits(note) and self.weigh.admits(note)

    def hit(self, note: Note, score: float, item: Item) -> Hit:
        return Hit(note, score, item.key, item.namespace, self.weigh.freshness(note))


def _round(store: BaseStore, search: _Search) -> list[Hit]:
    if getattr(store, "relevance_scores", False) is True:
        return _from_scores(store, search)
    return _scored_here(store, search)


def _hopped(store: BaseStore, search: _Search, hits: list[Hit], hops: Hops) -> list[Hit]:
    """``hits`` followed by the notes a second round finds for the names in the best of
    them, in the places ``hits`` leaves free of ``search.k``: at most ``hops.max_notes``
    and ``hops.max_tokens`` tokens, each scored the lower of its own score and the
    first round's last (so the list stays best first and above the floor)."""
    room = search.k - len(hits)
    seed = hop_query([hit.note.text for hit in hits[: hops.seeds]]) if room > 0 else ""
    if not seed:
        return hits
    known = {(hit.namespace, hit.key) for hit in hits}
    second = dataclasses.replace(search, query=seed, k=search.k + hops.max_notes)
    found = [hit for hit in _round(store, second) if (hit.namespace, hit.key) not in known]
    cap = min(hit.score for hit in hits)
    added = merge_hops(found[:room], lambda hit: hit.note.text, hops)
    return hits + [dataclasses.replace(hit, score=min(hit.score, cap)) for hit in added]


def _sessions(store: BaseStore, search: _Search, hits: list[Hit]) -> list[Hit]:
    """``hits`` and the session notes of the time window the question asks about, found
    by their time (scored ``DEFAULT_MIN_SCORE``, when not below ``search.min_score``),
    ranked as ``search`` ranks (the sessions first, in the order they were held)."""
    if search.min_score > DEFAULT_MIN_SCORE:
        return hits
    known = {(hit.namespace, hit.key) for hit in hits}
    found = list(hits)
    for item in _all(store, search.namespace, {**search.conditions, "unit": "session"}):
        note = _note(item)
        if note is not None and (item.namespace, item.key) not in known and search.admits(note):
            found.append(search.hit(note, DEFAULT_MIN_SCORE, item))
    return search.weigh.best(found, search.k)


def _keyed(store: BaseStore, search: _Search, hits: list[Hit], asked: AskedFact) -> list[Hit]:
    """``hits`` with the notes keyed by the fact ``asked`` (of a subject it names) scored
    at least ``DEFAULT_MIN_SCORE``, their key being evidence enough, and those the floor
    left out recalled by it when that is not below ``search.min_score``; ranked as
    ``search`` ranks; when ``asked.past``, each keyed note preceded by the notes it
    replaced (the answer to a question about the past), oldest first, scored as it. At
    most ``search.k``."""
    keyed = DEFAULT_MIN_SCORE
    found = [
        dataclasses.replace(hit, score=keyed)
        if hit.score < keyed and asked.matches(hit.note)
        else hit
        for hit in hits
    ]
    known = {(hit.namespace, hit.key) for hit in hits}
    for subject in sorted(asked.subjects) if keyed >= search.min_score else ():
        if search.conditions.get("subject", subject) != subject:
            continue  # the caller's filter names another subject
        for item in _all(store, search.namespace, {**search.conditions, "subject": subject}):
            note = _note(item)
            if (item.namespace, item.key) in known or note is None or not asked.matches(note):
                continue
            if search.admits(note):
                known.add((item.namespace, item.key))
                found.append(search.hit(note, keyed, item))
    ranked = search.weigh.best(found, search.k)
    if not asked.past:
        return ranked
    told: list[Hit] = []
    for hit in ranked:
        history: list[Hit] = []
        if asked.matches(hit.note):
            for key, older, value in predecessors(store, hit.namespace, hit.note, search.window.at):
                if (hit.namespace, key) in known or not search.weigh.admits(older):
                    continue
                if matches_filter(value, search.conditions):
                    known.add((hit.namespace, key))
                    freshness = search.weigh.freshness(older)
                    history.insert(0, Hit(older, hit.score, key, hit.namespace, freshness))
        told.extend((*history, hit))
    return told[: search.k]


def _scored_here(store: BaseStore, search: _Search) -> list[Hit]:
    found = _all(store, search.namespace, search.conditions)
    notes = [(item, note) for item in found if (note := _note(item))]
    texts = ("\n".join(text for _, text in indexed_texts(item.value, None)) for item, _ in notes)
    scores = score_texts(search.query, texts)
    hits = []
    for score, (item, note) in sorted(zip(scores, notes, strict=True), key=lambda p: -p[0]):
        if score <= 0.0:
            break
        if score < search.min_score:
            search.below_floor += 1
        elif not search.admits(note):
            search.stale += 1
        else:
            hits.append(search.hit(note, score, item))
    return search.weigh.best(hits, search.k)


def _log(
    store: BaseStore,
    search: _Search,
    thread_id: str | None,
    clock: Clock,
    hits: list[Hit],
) -> None:
    keys = tuple(hit.key for hit in hits)
    try:
        event = RecallEvent(
            at=clock(),
            namespace=search.namespace,
            query=search.query,
            thread_id=thread_id,
            returned=len(hits),
            dropped=min(search.below_floor, search.k - len(hits)),
            stale=search.stale,
            top_score=max((hit.score for hit in hits), default=None),
            keys=keys,
            overlap=overlap(keys, previous_keys(store, search.namespace, search.query)),
        )
        log_recall(store, event)
    except Exception as exc:  # the answer matters more than its statistics
        logger.warning("could not record a recall in %r: %s", store, exc)


def _from_scores(store: BaseStore, search: _Search) -> list[Hit]:
    # Results come best first, so the first score below the floor ends the search; with
    # a half-life every relevant note is read, since decay may promote any of them.
    hits: list[Hit] = []
    offset = 0
    while True:
        page = store.search(
            search.namespace,
            query=search.query,
            filter=search.conditions,
            limit=_PAGE,
            offset=offset,
        )
        for position, item in enumerate(page):
            score = item.score or 0.0
            if score < search.min_score or score <= 0.0:
                # the rest of the page is the next best: count what the floor turned away
                rest = (other.score or 0.0 for other in page[position:])
                search.below_floor += sum(1 for other in rest if 0.0 < other < search.min_score)
                return search.weigh.best(hits, search.k)
            note = _note(item)
            if note is None:
                continue
            if not search.admits(note):
                search.stale += 1
                continue
            hits.append(search.hit(note, score, item))
            enough = not search.weigh.reorders and len(hits) >= search.k
            if enough and len(best := search.weigh.best(hits, search.k)) == search.k:
                return best
        if len(page) < _PAGE:
            return search.weigh.best(hits, search.k)
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

"""Memory quality over time: what each recall returned and dropped, and what compaction saved.

Retrieval that gets worse rarely fails loudly: it returns fewer relevant notes, more
stale ones, or different ones for the same question. So every :func:`~statekeeper.memory.recall`
can leave a :class:`RecallEvent` in the store it read from, and every compaction of a
:class:`~statekeeper.memory.SummarizationNode` a :class:`CompactionEvent`; :func:`memory_stats`
aggregates them per thread and per time window (``statekeeper memory stats``).

Events are plain JSON items under the ``("statekeeper", "log", ...)`` namespaces of the
same store, so they travel with the notes (export, copy) and need no other database. They
are never notes: recall skips them.
"""

from __future__ import annotations

import datetime
import hashlib
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from langgraph.store.base import BaseStore

from statekeeper.errors import ConfigurationError

__all__ = [
    "LOG_NAMESPACE",
    "CompactionEvent",
    "MemoryStats",
    "RecallEvent",
    "StatsRow",
    "log_compaction",
    "log_recall",
    "memory_stats",
    "overlap",
    "previous_keys",
]

LOG_NAMESPACE = ("statekeeper", "log")
_RECALLS = (*LOG_NAMESPACE, "recall")
_COMPACTIONS = (*LOG_NAMESPACE, "compaction")
_LAST = (*LOG_NAMESPACE, "last-recall")  # the latest recall's keys per (namespace, query)
_PAGE = 500


@dataclass(frozen=True)
class RecallEvent:
    """One recall: when, of what, for whom, and what came back.

    ``dropped`` counts the candidates among the best ``k`` that scored above zero but
    below the floor; ``stale`` the notes left out because they had expired or were
    superseded at ``as_of``; ``overlap`` is the share of this recall's keys that the
    previous recall of the same query (same namespace) also returned, ``None`` when there
    was no previous one.
    """

    at: datetime.datetime
    namespace: tuple[str, ...]
    query: str
    thread_id: str | None
    returned: int
    dropped: int
    stale: int
    top_score: float | None
    keys: tuple[str, ...]
    overlap: float | None


@dataclass(frozen=True)
class CompactionEvent:
    """One compaction of a thread by the summarization node, with its token accounting."""

    at: datetime.datetime
    thread_id: str
    tokens_before: int
    tokens_after: int
    summary_tokens: int
    tokens_saved: int


@dataclass
class StatsRow:
    """Aggregates over a group of events (a thread, a time window, or everything)."""

    group: str
    recalls: int = 0
    notes_returned: float = 0.0  # mean per recall
    dropped_below_floor: float = 0.0  # mean per recall
    top_score: float | None = None  # mean over recalls that returned something
    empty_share: float = 0.0  # share of recalls that returned nothing
    stale_share: float | None = None  # stale notes filtered / (returned + stale)
    overlap: float | None = None  # mean over recalls that had a previous one
    compactions: int = 0
    tokens_saved: int = 0
    _scores: list[float] = field(default_factory=list, repr=False)
    _overlaps: list[float] = field(default_factory=list, repr=False)
    _returned: int = field(default=0, repr=False)
    _dropped: int = field(default=0, repr=False)
    _stale: int = field(default=0, repr=False)
    _empty: int = field(default=0, repr=False)

    def add_recall(self, event: RecallEvent) -> None:
        self.recalls += 1
        self._returned += event.returned
        self._dropped += event.dropped
        self._stale += event.stale
        self._empty += event.returned == 0
        if event.top_score is not None:
            self._scores.append(event.top_score)
        if event.overlap is not None:
            self._overlaps.append(event.overlap)

    def add_compaction(self, event: CompactionEvent) -> None:
        self.compactions += 1
        self.tokens_saved += event.tokens_saved

    def finish(self) -> StatsRow:
        if self.recalls:
            self.notes_returned = self._returned / self.recalls
            self.dropped_below_floor = self._dropped / self.recalls
            self.empty_share = self._empty / self.recalls
        seen = self._returned + self._stale
        self.stale_share = self._stale / seen if seen else None
        self.top_score = sum(self._scores) / len(self._scores) if self._scores else None
        self.overlap = sum(self._overlaps) / len(self._overlaps) if self._overlaps else None
        return self

    def to_json(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if not key.startswith("_")}


@dataclass(frozen=True)
class MemoryStats:
    """:func:`memory_stats`'s answer: everything, then per thread, then per window."""

    overall: StatsRow
    threads: list[StatsRow]
    windows: list[StatsRow]

    def to_json(self) -> dict[str, Any]:
        return {
            "overall": self.overall.to_json(),
            "threads": [row.to_json() for row in self.threads],
            "windows": [row.to_json() for row in self.windows],
        }


def previous_keys(store: BaseStore, namespace: Sequence[str], query: str) -> tuple[str, ...] | None:
    """The keys the latest logged recall of ``query`` under ``namespace`` returned."""
    item = store.get(_LAST, _query_key(namespace, query))
    if item is None:
        return None
    keys = item.value.get("keys")
    return tuple(keys) if isinstance(keys, list) else None


def log_recall(store: BaseStore, event: RecallEvent) -> None:
    """Store ``event`` and remember its keys as the latest for its (namespace, query)."""
    value = _event_value(event)
    store.put(_RECALLS, _event_key(event.at), value, index=False)
    store.put(_LAST, _query_key(event.namespace, event.query), {"keys": value["keys"]}, index=False)


def log_compaction(store: BaseStore, event: CompactionEvent) -> None:
    """Store ``event``."""
    store.put(_COMPACTIONS, _event_key(event.at), _event_value(event), index=False)


def memory_stats(
    store: BaseStore,
    *,
    thread_id: str | None = None,
    since: datetime.datetime | None = None,
    until: datetime.datetime | None = None,
    window: datetime.timedelta = datetime.timedelta(days=1),
) -> MemoryStats:
    """Aggregate the logged events (of ``thread_id`` only, when given) between ``since``
    (inclusive) and ``until`` (exclusive): overall, per thread (most recalls first; a
    recall without a thread counts under its namespace), and per ``window`` of time
    (oldest first, windows aligned on the Unix epoch, only windows with events).

    Raises:
        ConfigurationError: ``window`` is not positive, or a bound has no timezone.
    """
    if window <= datetime.timedelta(0):
        raise ConfigurationError(f"window must be positive, got {window}")
    for bound in (since, until):
        if bound is not None and bound.utcoffset() is None:
            raise ConfigurationError(f"since/until must be timezone-aware, got {bound!r}")
    overall = StatsRow("all")
    threads: dict[str, StatsRow] = {}
    windows: dict[datetime.datetime, StatsRow] = {}

    def rows(at: datetime.datetime, group: str) -> Iterator[StatsRow]:
        yield overall
        yield threads.setdefault(group, StatsRow(group))
        start = _window_start(at, window)
        yield windows.setdefault(start, StatsRow(start.isoformat()))

    def wanted(at: datetime.datetime, thread: str | None) -> bool:
        return (
            (thread_id is None or thread == thread_id)
            and (since is None or at >= since)
            and (until is None or at < until)
        )

    for recall in _recall_events(store):
        if wanted(recall.at, recall.thread_id):
            for row in rows(recall.at, recall.thread_id or "/".join(recall.namespace)):
                row.add_recall(recall)
    for compaction in _compaction_events(store):
        if wanted(compaction.at, compaction.thread_id):
            for row in rows(compaction.at, compaction.thread_id):
                row.add_compaction(compaction)
    return MemoryStats(
        overall=overall.finish(),
        threads=sorted((r.finish() for r in threads.values()), key=lambda r: -r.recalls),
        windows=[windows[start].finish() for start in sorted(windows)],
    )


def overlap(keys: Sequence[str], previous: Sequence[str] | None) -> float | None:
    """The share of ``keys`` that ``previous`` also holds (1.0 when both are empty)."""
    if previous is None:
        return None
    if not keys:
        return 1.0 if not previous else 0.0
    return len(set(keys) & set(previous)) / len(keys)


# -- storage -------------------------------------------------------------------------------


def _event_key(at: datetime.datetime) -> str:
    # time first so keys sort by time; random after, so two events never collide
    return f"{at.astimezone(datetime.UTC).strftime('%Y%m%dT%H%M%S.%fZ')}-{uuid.uuid4().hex[:8]}"


def _query_key(namespace: Sequence[str], query: str) -> str:
    digest = hashlib.sha256()
    for part in (*namespace, " ".join(query.casefold().split())):
        digest.update(part.encode("utf-8", "surrogatepass") + b"\0")
    return digest.hexdigest()[:32]


def _event_value(event: RecallEvent | CompactionEvent) -> dict[str, Any]:
    value = asdict(event)
    value["at"] = event.at.astimezone(datetime.UTC).isoformat()
    for name in ("namespace", "keys"):
        if name in value:
            value[name] = list(value[name])
    return value


def _items(store: BaseStore, namespace: tuple[str, ...]) -> Iterable[dict[str, Any]]:
    offset = 0
    while True:
        page = store.search(namespace, limit=_PAGE, offset=offset)
        for item in page:
            if item.namespace == namespace:  # not a deeper namespace
                yield item.value
        if len(page) < _PAGE:
            return
        offset += _PAGE


def _recall_events(store: BaseStore) -> Iterator[RecallEvent]:
    for value in _items(store, _RECALLS):
        try:
            yield RecallEvent(
                at=datetime.datetime.fromisoformat(value["at"]),
                namespace=tuple(value["namespace"]),
                query=str(value["query"]),
                thread_id=value.get("thread_id"),
                returned=int(value["returned"]),
                dropped=int(value["dropped"]),
                stale=int(value["stale"]),
                top_score=value.get("top_score"),
                keys=tuple(value.get("keys") or ()),
                overlap=value.get("overlap"),
            )
        except (KeyError, TypeError, ValueError):
            continue  # an event written by something else: not ours to count


def _compaction_events(store: BaseStore) -> Iterator[CompactionEvent]:
    for value in _items(store, _COMPACTIONS):
        try:
            yield CompactionEvent(
                at=datetime.datetime.fromisoformat(value["at"]),
                thread_id=str(value["thread_id"]),
                tokens_before=int(value["tokens_before"]),
                tokens_after=int(value["tokens_after"]),
                summary_tokens=int(value["summary_tokens"]),
                tokens_saved=int(value["tokens_saved"]),
            )
        except (KeyError, TypeError, ValueError):
            continue


def _window_start(at: datetime.datetime, window: datetime.timedelta) -> datetime.datetime:
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return epoch + window * ((at - epoch) // window)

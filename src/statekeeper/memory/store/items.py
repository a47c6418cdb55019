"""The memory store engine of backends that keep each item whole under its own name (one
file, one Redis key) and search by reading the items under the prefix: the file and the
Redis store. A backend supplies reads, writes and locking (:class:`ItemStore`'s abstract
methods); this module runs batches over them with the rules of ``docs/memory-store.md``,
scoring with the same code as the SQLite store (:mod:`statekeeper.memory.store.search`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from langgraph.store.base import (
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)

from statekeeper.errors import StorageError
from statekeeper.memory.store.base import MemoryStore, Plan, Write, stamp
from statekeeper.memory.store.lexical import query_terms
from statekeeper.memory.store.search import (
    Fusion,
    bm25,
    lexical_scores,
    literal_prefix,
    rank,
    select_namespaces,
    similarity,
)
from statekeeper.memory.store.values import decode_value, matches_filter

__all__ = ["ItemStore", "StoredItem", "search_items"]

Namespace = tuple[str, ...]


@dataclass(frozen=True)
class StoredItem:
    """One item as a backend stores it."""

    namespace: Namespace
    key: str
    value: str  # JSON text (encode_value)
    created_at: str  # stamp()
    updated_at: str
    ttl: float | None  # minutes
    expires_at: float | None  # Unix seconds; None: never
    terms: tuple[str, ...]  # normalised terms of its indexed text, repeats kept
    vectors: tuple[tuple[str, bytes], ...]  # (path, packed embedding)

    @classmethod
    def made(cls, write: Write, previous: StoredItem | None, now: float) -> StoredItem:
        """The item ``write`` (a put) stores at ``now``: it keeps ``created_at`` of a live
        ``previous`` item of the same key; an expired one is replaced by a new item."""
        assert write.value is not None
        created = stamp(now)
        if previous is not None and previous.live(now):
            created = previous.created_at
        return cls(
            namespace=write.namespace,
            key=write.key,
            value=write.value,
            created_at=created,
            updated_at=stamp(now),
            ttl=write.ttl,
            expires_at=None if write.ttl is None else now + write.ttl * 60.0,
            terms=write.terms,
            vectors=write.vectors,
        )

    def live(self, now: float) -> bool:
        """Whether the item has not expired at ``now``."""
        return self.expires_at is None or self.expires_at > now

    @property
    def namespace_text(self) -> str:
        """The namespace's labels joined by ``.``: the order SQLite sorts namespaces in."""
        return ".".join(self.namespace)

    def item(self) -> Item:
        """The item as LangGraph returns it from ``get`` (a fresh copy of the value)."""
        return Item(
            value=decode_value(self.value),
            key=self.key,
            namespace=self.namespace,
            created_at=datetime.fromisoformat(self.created_at),
            updated_at=datetime.fromisoformat(self.updated_at),
        )

    def search_item(self, score: float | None) -> SearchItem:
        """The item as a search result."""
        return SearchItem(
            namespace=self.namespace,
            key=self.key,
            value=decode_value(self.value),
            created_at=datetime.fromisoformat(self.created_at),
            updated_at=datetime.fromisoformat(self.updated_at),
            score=score,
        )


def search_items(
    items: Sequence[StoredItem],
    op: SearchOp,
    query_vector: Sequence[float] | None,
    fusion: Fusion,
) -> list[tuple[StoredItem, float | None]]:
    """One page of ``op``'s results among ``items`` (every live item under the prefix),
    ranked as the SQLite store ranks them: newest first without a query; with one, by
    score, equal scores in BM25 order, then newest first."""
    newest = sorted(range(len(items)), key=lambda i: (items[i].namespace_text, items[i].key))
    newest.sort(key=lambda i: items[i].updated_at, reverse=True)  # stable: ties stay sorted

    def keep(i: int) -> bool:
        return not op.filter or matches_filter(decode_value(items[i].value), op.filter)

    if not op.query:
        listing = [i for i in newest if keep(i)][op.offset : op.offset + op.limit]
        return [(items[i], None) for i in listing]
    wanted = query_terms(op.query)
    lexical: dict[int, float] = {}
    order: list[int] = []
    if wanted:
        found = {
            i: frozenset(wanted).intersection(item.terms)
            for i, item in enumerate(items)
            if not frozenset(wanted).isdisjoint(item.terms)
        }
        lexical = lexical_scores(wanted, len(items), found)
        indexed = {i: item.terms for i, item in enumerate(items) if item.terms}
        relevance = bm25(wanted, indexed)
        position = {i: n for n, i in enumerate(newest)}
        order = sorted(found, key=lambda i: (-relevance[i], position[i]))
    semantic = None
    if query_vector is not None:
        semantic = {
            i: similarity(query_vector, (blob for _, blob in items[i].vectors))
            for i in newest
            if items[i].vectors
        }
        order += [i for i in semantic if i not in lexical]
    ranked = rank(order, lexical, semantic, fusion, keep)
    return [(items[i], score) for i, score in ranked[op.offset : op.offset + op.limit]]


class ItemStore(MemoryStore):
    """A store that keeps each item whole (see the module docstring). Each put and delete
    is atomic on its own; the operations of a batch run one after the other (a write
    interrupted midway through a batch leaves the writes before it)."""

    def __init__(
        self,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        semantic_weight: float = 0.5,
    ) -> None:
        super().__init__(index=index, ttl=ttl, semantic_weight=semantic_weight)
        self._closed = False

    def close(self) -> None:
        """Mark the store closed. Idempotent; later calls raise StorageError."""
        self._closed = True

    def _run(self, plan: Plan, now: float) -> list[Result]:
        if self._closed:
            raise StorageError(f"{self!r} is closed; open a new store")
        results: list[Result] = []
        refresh: list[StoredItem] = []
        with self._writing({write.namespace for write in plan.writes}):
            for step in plan.steps:
                if isinstance(step, Write):
                    self._put(step, now)
                    results.append(None)
                elif isinstance(step, GetOp):
                    found = self._load(step.namespace, step.key)
                    live = found if found is not None and found.live(now) else None
                    results.append(live.item() if live is not None else None)
                    if live is not None and step.refresh_ttl and live.ttl is not None:
                        refresh.append(live)
                elif isinstance(step, SearchOp):
                    items = [i for i in self._scan(step.namespace_prefix, now) if i.live(now)]
                    vector = plan.query_vectors.get(step.query or "")
                    page = search_items(items, step, vector, self.fusion)
                    results.append([item.search_item(score) for item, score in page])
                    if step.refresh_ttl:
                        refresh.extend(item for item, _ in page if item.ttl is not None)
                else:
                    assert isinstance(step, ListNamespacesOp)
                    found_ns = self._namespaces(literal_prefix(step), now)
                    results.append(select_namespaces(found_ns, step))
        if refresh:
            self._refresh(refresh, now)
        return results

    # -- what a backend provides ---------------------------------------------------------

    def _writing(self, namespaces: set[Namespace]) -> contextlib.AbstractContextManager[None]:
        """Held while a batch writing into ``namespaces`` runs (a lock, or nothing)."""
        return contextlib.nullcontext()

    def _put(self, write: Write, now: float) -> None:
        """Store (or delete, for a ``None`` value) one item, atomically, keeping the
        ``created_at`` of a live item it replaces (see :meth:`StoredItem.made`)."""
        raise NotImplementedError

    def _load(self, namespace: Namespace, key: str) -> StoredItem | None:
        """The stored item, expired or not; ``None`` if there is none."""
        raise NotImplementedError

    def _scan(self, prefix: Namespace, now: float) -> Iterable[StoredItem]:
        """Every item under ``prefix`` (``()``: all), at least those live at ``now``."""
        raise NotImplementedError

    def _namespaces(self, prefix: Namespace, now: float) -> Iterable[Namespace]:
        """The namespaces under ``prefix`` holding an item live at ``now``."""
        raise NotImplementedError

    def _refresh(self, items: Sequence[StoredItem], now: float) -> None:
        """Restart the TTL clock of ``items`` (all with a TTL) that are still live."""
        raise NotImplementedError

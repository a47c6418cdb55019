"""Search rules every memory store shares, whatever holds its items (see
``docs/memory-store.md``): the lexical and semantic parts of a
score and how they mix and rank, and which namespaces ``list_namespaces`` returns.

A store finds its candidates its own way (FTS5 on SQLite, a scan of the items under the
prefix on files and Redis) and hands them here, so a given collection of items gets the
same scores on every backend.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from langgraph.store.base import ListNamespacesOp, MatchCondition

from statekeeper.memory.store.lexical import coverage, weights
from statekeeper.memory.store.values import cosine, unpack_vector

__all__ = [
    "Fusion",
    "bm25",
    "lexical_scores",
    "literal_prefix",
    "rank",
    "select_namespaces",
    "similarity",
]

K = TypeVar("K", bound=Hashable)

# FTS5's bm25() parameters: backends without FTS5 order equal scores the way SQLite does.
_K1 = 1.2
_B = 0.75
_MIN_IDF = 1e-6


def lexical_scores(
    wanted: Sequence[str], n_docs: int, found: Mapping[K, Collection[str]]
) -> dict[K, float]:
    """The lexical score of each item in ``found`` (item -> its terms that are query
    terms), over ``n_docs`` live items under the searched prefix: document frequencies
    are counted among ``found``, which must hold every item with a query term."""
    doc_freq = {term: sum(term in terms for terms in found.values()) for term in wanted}
    term_weights = weights(wanted, n_docs, doc_freq)
    return {item: coverage(term_weights, terms) for item, terms in found.items()}


def similarity(query_vector: Sequence[float], blobs: Iterable[bytes]) -> float:
    """The cosine of the best-matching stored embedding, clipped to [0, 1]; 0 for none."""
    best = 0.0
    for blob in blobs:
        best = max(best, min(max(cosine(query_vector, unpack_vector(blob)), 0.0), 1.0))
    return best


@dataclass(frozen=True)
class Fusion:
    """How a lexical and a semantic score make one, in [0, 1].

    Without a ``floor`` (a model that does not say how its cosines are spread):
    ``score = (1 - weight) * lexical + weight * max(0, cos)``. With one (what unrelated
    texts reach with the model, e.g. :class:`~statekeeper.memory.embeddings.StaticEmbeddings`),
    a cosine at or below it counts as no similarity, the rest is stretched to [0, 1]
    (``semantic = (cos - floor) / (1 - floor)``), and the two are combined as a soft OR,
    ``score = 1 - (1 - lexical) * (1 - weight * semantic)``: similarity adds to the
    lexical evidence without diluting it, so the relevance floor keeps its meaning. With
    a ``support`` too (the lexical score below which the model's similarity says nothing
    reliable, e.g. ``StaticEmbeddings.lexical_support``), an item scoring less than it
    lexically keeps its lexical score.
    """

    weight: float = 0.5
    floor: float | None = None
    support: float = 0.0

    def semantic(self, cos: float) -> float:
        if self.floor is None:
            return cos
        return min(max(cos - self.floor, 0.0) / (1.0 - self.floor), 1.0)

    def score(self, lexical: float, semantic: float) -> float:
        if self.floor is None:
            return (1.0 - self.weight) * lexical + self.weight * semantic
        if lexical < self.support:
            return lexical  # too little lexical evidence for this model's similarity to add to
        # calibrated similarity: it adds to the lexical evidence, never dilutes it
        return 1.0 - (1.0 - lexical) * (1.0 - self.weight * semantic)


def rank(
    order: Sequence[K],
    lexical: Mapping[K, float],
    semantic: Mapping[K, float] | None,
    fusion: Fusion,
    keep: Callable[[K], bool],
) -> list[tuple[K, float]]:
    """Score the candidates and sort them best first.

    ``order`` holds every candidate once: the lexical matches in BM25 order, then the
    items only embeddings found, newest first. Without ``semantic`` (cosines, from
    :func:`similarity`) the score is the lexical one; with it, ``fusion`` mixes them.
    Items scoring 0 or that ``keep`` refuses (the filter) are dropped; equal scores keep
    ``order``.
    """
    if semantic is None:
        scores = {item: lexical.get(item, 0.0) for item in order}
    else:
        scores = {
            item: fusion.score(lexical.get(item, 0.0), fusion.semantic(semantic.get(item, 0.0)))
            for item in order
        }
    ranked = [(item, scores[item]) for item in order if scores[item] > 0.0 and keep(item)]
    ranked.sort(key=lambda pair: -pair[1])  # stable: equal scores keep the order given
    return ranked


def bm25(wanted: Collection[str], docs: Mapping[K, Sequence[str]]) -> dict[K, float]:
    """FTS5's ``bm25()``, as a positive number (higher is better), of each of ``docs``
    (every indexed item under the prefix -> its terms, repeats kept) for the query terms
    ``wanted``. It only orders items of equal score, as FTS5 does on SQLite."""
    if not docs:
        return {}
    n = len(docs)
    average = max(sum(len(terms) for terms in docs.values()) / n, 1.0)
    idf = {}
    for term in wanted:
        having = sum(term in terms for terms in docs.values())
        idf[term] = max(math.log((n - having + 0.5) / (having + 0.5)), _MIN_IDF)
    result = {}
    for item, terms in docs.items():
        scale = _K1 * (1.0 - _B + _B * len(terms) / average)
        total = 0.0
        for term in wanted:
            freq = terms.count(term)
            if freq:
                total += idf[term] * freq * (_K1 + 1.0) / (freq + scale)
        result[item] = total
    return result


# -- list_namespaces -------------------------------------------------------------------------


def literal_prefix(op: ListNamespacesOp) -> tuple[str, ...]:
    """The labels before the first wildcard of the first prefix condition: every
    namespace ``op`` returns is under it, so a store may read only that part."""
    for condition in op.match_conditions or ():
        if condition.match_type == "prefix":
            path = tuple(condition.path)
            return path[: path.index("*")] if "*" in path else path
    return ()


def select_namespaces(
    found: Iterable[tuple[str, ...]], op: ListNamespacesOp
) -> list[tuple[str, ...]]:
    """Of the namespaces holding live items, those meeting every condition, truncated to
    ``max_depth`` labels, distinct, sorted, then paged by ``offset`` and ``limit``."""
    conditions = tuple(op.match_conditions or ())
    kept = {
        ns[: op.max_depth] if op.max_depth is not None else ns
        for ns in found
        if all(_matches(condition, ns) for condition in conditions)
    }
    return sorted(kept)[op.offset : op.offset + op.limit]


def _matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if not path:
        return True
    if len(namespace) < len(path):
        return False
    part = namespace[: len(path)] if condition.match_type == "prefix" else namespace[-len(path) :]
    return all(p == "*" or p == n for p, n in zip(path, part, strict=True))

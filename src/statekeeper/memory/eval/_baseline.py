"""The baseline the memory pipeline is measured against: plain Okapi BM25 over raw messages.

Written here in a few lines, independently of the store's full-text search, so the
baseline cannot inherit (or hide) anything from the pipeline's scoring.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

__all__ = ["BM25Index", "tokenize"]

_WORD = re.compile(r"\w+")


def tokenize(text: str) -> list[str]:
    """Lower-cased runs of letters and digits: no stemming, no stop words."""
    return _WORD.findall(text.casefold())


class BM25Index:
    """Okapi BM25 over ``documents`` (``k1`` = 1.2, ``b`` = 0.75, Lucene's non-negative
    IDF ``ln(1 + (N - n + 0.5) / (n + 0.5))``)."""

    def __init__(self, documents: Sequence[str], *, k1: float = 1.2, b: float = 0.75) -> None:
        self.k1 = k1
        self.b = b
        self._terms = [Counter(tokenize(document)) for document in documents]
        self._lengths = [sum(terms.values()) for terms in self._terms]
        self._average = sum(self._lengths) / len(documents) if documents else 0.0
        frequency: Counter[str] = Counter()
        for terms in self._terms:
            frequency.update(terms.keys())
        total = len(documents)
        self._idf = {
            term: math.log(1 + (total - n + 0.5) / (n + 0.5)) for term, n in frequency.items()
        }

    def score(self, query: str, index: int) -> float:
        """The BM25 score of document ``index`` for ``query`` (0.0: no term in common).
        A term repeated in the query counts once per occurrence, as in Lucene."""
        terms = self._terms[index]
        norm = self.k1 * (1 - self.b + self.b * self._lengths[index] / (self._average or 1))
        total = 0.0
        for term in tokenize(query):
            tf = terms.get(term, 0)
            if tf:
                total += self._idf[term] * tf * (self.k1 + 1) / (tf + norm)
        return total

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        """The ``k`` best ``(document index, score)`` pairs, best first; documents with no
        query term are never returned; ties keep document order."""
        scored = [(i, self.score(query, i)) for i in range(len(self._terms))]
        matches = [pair for pair in scored if pair[1] > 0]
        matches.sort(key=lambda pair: -pair[1])
        return matches[:k]

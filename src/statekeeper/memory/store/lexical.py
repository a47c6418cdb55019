"""Lexical relevance without a model: the terms of a text and a normalised score.

Every memory search scores text the same way, so one relevance floor means the same thing
in every store and in :func:`statekeeper.memory.recall` over stores that are not ours.

Terms: the text is NFKC-normalised and casefolded, split into words (letters, digits and
the combining marks that belong to them), stopwords and single letters are dropped, and a
light English stemmer folds plurals, ``-ing`` and ``-ed`` ("deploys", "deploying" and
"deployed" all become "deploy"). Scripts written without spaces (Chinese, Japanese, Thai)
are matched by whole runs of characters only.

Score of a document for a query, over a collection of ``N`` documents of which ``n(t)``
contain the term ``t`` (``n(t)`` is at least 1, so a term no document has counts as much as
the rarest one)::

    w(t)  = ln(1 + (N - n(t) + 0.5) / (n(t) + 0.5))       # BM25's inverse document frequency
    score = min(1, sum(w(t) for t in query terms found in the document)
                   / sum(w(t) for the TOP_TERMS query terms of highest w(t)))

That is the share of the query's information the document contains: 0 when no query term
occurs in it, 1 when it holds the query's ``TOP_TERMS`` most informative terms; a term
most documents contain adds little either way. A question longer than ``TOP_TERMS`` terms
is not held to holding every one of its words: the answer to "which city did Ana fly to
when visiting Leo?" is told in two notes, and neither says "fly".
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Collection, Iterable, Mapping, Sequence

__all__ = [
    "STOPWORDS",
    "TOP_TERMS",
    "coverage",
    "query_terms",
    "score_texts",
    "stem",
    "terms",
    "weights",
]

# A document is scored against the query's four most informative terms: about what one
# statement of a fact holds. Measured on the hand-labelled notes of the test suite and the
# dev split of benchmarks/memory (docs/memory-store.md).
TOP_TERMS = 4

_ASCII_WORD = re.compile(r"[a-z0-9]+")

# English function words, the light verbs that go with anything ("use", "take", "get",
# "see"), the words people use to ask a memory for something ("what did I tell you
# about...", "do you remember...") and the units a question asks a time in ("which month",
# "how many years"; a note's dates are in its topics as "2024-03-18" and "March 2024"):
# they say nothing about which note is meant, and left in a query they would lower the
# score of every right answer (or raise that of a wrong one).
STOPWORDS = frozenset(
    _ASCII_WORD.findall(
        """
    a about above after again against all also am an and any are as at be because been
    before being below between both but by can could did do does doing done down during
    each else ever few for from further had has have having he her here hers herself him
    himself his how i if in into is it its itself just let me more most my myself no nor
    not now of off on once only or other our ours ourselves out over own same she should
    so some such than that the their theirs them themselves then there these they this
    those through to too under until up very was we were what when where which while who
    whom why will with would you your yours yourself yourselves
    s t d ll m re ve don didn doesn isn wasn aren weren won wouldn shouldn couldn
    anything something thing things stuff lot lots kind much many often way ways
    get gets got getting take takes took taking use uses used using make makes made making
    go goes went going gonna want wants wanted need needs needed like likes liked really
    think thinking thought maybe see sees seeing seen
    day days week weeks month months year years
    remember recall remind mention mentioned tell told say said ask asked know knew
    please thanks thank ok okay yes yeah hey hi hello
    """
    )
)


def terms(text: str) -> list[str]:
    """The normalised terms of ``text``, in order, repeats kept (empty for no words)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    words = _ASCII_WORD.findall(folded) if folded.isascii() else _words(folded)
    return [
        stem(word) for word in words if word not in STOPWORDS and (len(word) > 1 or word.isdigit())
    ]


def query_terms(text: str) -> tuple[str, ...]:
    """The distinct terms of a query, in first-seen order."""
    return tuple(dict.fromkeys(terms(text)))


def stem(word: str) -> str:
    """Fold English plurals and ``-ing``/``-ed`` forms onto one stem, and drop a final
    ``e`` so "make", "makes" and "making" meet. Deliberately light: the
    same rules run on notes and queries, so a stem only has to be consistent, not a word."""
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith(("ies", "ied")) and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith(("sses", "ches", "shes", "xes", "zes")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    elif word.endswith("ing") and len(word) >= 6:
        word = _undouble(word[:-3])
    elif word.endswith("ed") and len(word) >= 5:
        word = _undouble(word[:-2])
    if word.endswith("e") and len(word) >= 4:
        word = word[:-1]
    return word


def weights(query: Sequence[str], n_docs: int, doc_freq: Mapping[str, int]) -> dict[str, float]:
    """``w(t)`` for every query term, over ``n_docs`` documents with ``doc_freq`` (see the
    module docstring); terms missing from ``doc_freq`` count as found in one document."""
    n = max(n_docs, 1)
    result = {}
    for term in query:
        found = min(max(doc_freq.get(term, 0), 1), n)
        result[term] = math.log(1.0 + (n - found + 0.5) / (found + 0.5))
    return result


def coverage(term_weights: Mapping[str, float], doc_terms: Collection[str]) -> float:
    """The IDF-weighted share of the query's information that occurs in ``doc_terms``, in
    [0, 1]: the weight of the query terms found over that of the ``TOP_TERMS`` heaviest."""
    total = sum(sorted(term_weights.values(), reverse=True)[:TOP_TERMS])
    if total <= 0.0:
        return 0.0
    found = sum(w for term, w in term_weights.items() if term in doc_terms)
    return min(found / total, 1.0)


def score_texts(query: str, documents: Iterable[str]) -> list[float]:
    """Score each of ``documents`` for ``query``, the collection being ``documents``
    themselves: what a store whose own scores cannot be trusted gets from recall."""
    wanted = query_terms(query)
    doc_terms = [frozenset(terms(text)) for text in documents]
    if not wanted:
        return [0.0] * len(doc_terms)
    doc_freq = {term: sum(term in found for found in doc_terms) for term in wanted}
    term_weights = weights(wanted, len(doc_terms), doc_freq)
    return [coverage(term_weights, found) for found in doc_terms]


def _words(text: str) -> list[str]:
    # Slow path for non-ASCII text: a regex word class would split Devanagari, Thai or
    # decomposed accents at their combining marks, which are part of the word.
    words: list[str] = []
    current: list[str] = []
    for char in text:
        if char.isalnum() or (current and unicodedata.category(char).startswith("M")):
            current.append(char)
        elif current:
            words.append("".join(current))
            current = []
    if current:
        words.append("".join(current))
    return words


def _undouble(word: str) -> str:
    # "running" -> "runn" -> "run"; but "falling" -> "fall" and "missing" -> "miss" keep
    # the double letter their base form has (Porter's rule).
    if len(word) >= 3 and word[-1] == word[-2] and word[-1] not in "lsz":
        return word[:-1]
    return word

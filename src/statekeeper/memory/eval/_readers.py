"""Readers: who turns the context a condition sends into an answer, and how it is scored.

Two kinds:

- :class:`SpanReader`, offline and deterministic: it looks for the gold answer in the
  context. ``contained`` says whether the context holds the gold answer (normalised, as a
  contiguous run of words); ``f1`` is the token F1 of the context's best-matching span.
  It measures what a perfect reader could answer from the context; it needs no model.
- :class:`ChatReader`: any LangChain chat model is asked the question with the context;
  its answer is scored against the gold answer with the same normalisation (``f1`` of
  the whole answer; ``contained`` when the answer holds the gold answer). With
  :func:`reader_from` a ``"provider:model"`` string is opened by LangChain's
  ``init_chat_model``, imported only then.

Normalisation (:func:`normalize`) is SQuAD's (case folded, punctuation and the articles
"a", "an", "the" dropped) plus dates: "26 April 2024", "April 26, 2024" and "2024-04-26"
are all ``2024 04 26``, and "April 2024" is ``2024 04``, so an answer given as a month is
found in a context that names a day of it. Hedges that open a gold answer ("around 26
April 2024") are dropped from it.
"""

from __future__ import annotations

import importlib
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from statekeeper.errors import ConfigurationError

__all__ = [
    "ChatReader",
    "Reader",
    "Reading",
    "SpanReader",
    "answer_tokens",
    "best_span_f1",
    "contains",
    "normalize",
    "reader_from",
    "token_f1",
]

_MONTHS = {
    name: number
    for number, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for name in names
}
_MONTH = "(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_ISO = re.compile(r"\b(\d{4})-(\d{1,2})(?:-(\d{1,2}))?\b")
_ORDINAL = r"(\d{1,2})(?:st|nd|rd|th)?"
_DAY_MONTH_YEAR = re.compile(rf"\b{_ORDINAL}\s+(?:of\s+)?{_MONTH}\s*,?\s+(\d{{4}})\b")
_MONTH_DAY_YEAR = re.compile(rf"\b{_MONTH}\s+{_ORDINAL}\s*,?\s+(\d{{4}})\b")
_MONTH_YEAR = re.compile(rf"\b{_MONTH}\s*,?\s+(\d{{4}})\b")
_WORD = re.compile(r"\w+")
_ARTICLES = frozenset({"a", "an", "the"})
_HEDGES = frozenset({"around", "about", "approximately", "roughly", "circa"})
_UNKNOWN = "unknown"  # what a chat reader is told to answer when the context does not say


def _date(year: str, month: int, day: str | None = None) -> str:
    return f" {year} {month:02d} {int(day):02d} " if day else f" {year} {month:02d} "


def _dates(text: str) -> str:
    text = _ISO.sub(lambda m: _date(m[1], int(m[2]), m[3]), text)
    text = _DAY_MONTH_YEAR.sub(lambda m: _date(m[3], _MONTHS[m[2]], m[1]), text)
    text = _MONTH_DAY_YEAR.sub(lambda m: _date(m[3], _MONTHS[m[1]], m[2]), text)
    return _MONTH_YEAR.sub(lambda m: _date(m[2], _MONTHS[m[1]]), text)


def normalize(text: str) -> list[str]:
    """``text`` as compared: case-folded words, dates as ``YYYY MM [DD]``, no
    punctuation, no articles (``"The 26th of April, 2024!"`` -> ``["2024", "04",
    "26"]``)."""
    words = _WORD.findall(_dates(text.casefold()))
    return [word for word in words if word not in _ARTICLES]


def answer_tokens(gold: str) -> list[str]:
    """A gold answer normalised, without the hedges that open it ("around", "about"...)."""
    words = normalize(gold)
    while len(words) > 1 and words[0] in _HEDGES:
        words = words[1:]
    return words


def contains(context: Sequence[str], gold: Sequence[str]) -> bool:
    """Whether the normalised ``gold`` is a contiguous run of the normalised ``context``
    (an empty ``gold`` is in nothing)."""
    if not gold:
        return False
    return f" {' '.join(gold)} " in f" {' '.join(context)} "


def token_f1(candidate: Sequence[str], gold: Sequence[str]) -> float:
    """SQuAD's token F1: the harmonic mean of precision and recall of the words the two
    share, counted with multiplicity; 0.0 when either is empty."""
    common = sum((Counter(candidate) & Counter(gold)).values())
    if not common:
        return 0.0
    precision, recall = common / len(candidate), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def best_span_f1(context: Sequence[str], gold: Sequence[str]) -> tuple[float, tuple[int, int]]:
    """The highest :func:`token_f1` of any contiguous span of ``context`` against
    ``gold``, and that span (``(start, end)``, end exclusive; the first best one);
    ``(0.0, (0, 0))`` when they share no word.

    Exact: a best span starts and ends on a word of ``gold`` (trimming any other word only
    raises precision), and a span of ``n`` words sharing ``c`` of the ``g`` gold words has
    F1 ``2c / (n + g)``, so spans longer than ``2g / best - g`` words cannot win."""
    wanted = Counter(gold)
    g = len(gold)
    best, where = 0.0, (0, 0)
    if not g:
        return best, where
    for start, word in enumerate(context):
        if word not in wanted:
            continue
        left = Counter(wanted)
        common = 0
        end = start
        while end < len(context):
            if best and end - start + 1 >= 2 * g / best - g:
                break
            token = context[end]
            end += 1
            if left[token] > 0:
                left[token] -= 1
                common += 1
                f1 = 2 * common / (end - start + g)
                if f1 > best:
                    best, where = f1, (start, end)
                    if best == 1.0:
                        return best, where
    return best, where


@dataclass(frozen=True)
class Reading:
    """One question read from one context: the reader's ``answer`` (the best span for the
    offline reader), its token ``f1`` against the gold answer, whether the gold answer is
    ``contained`` (in the context for the offline reader, in the answer for a chat
    model), and, for a question the conversation does not answer, whether the reader
    ``abstained`` (``None`` when it cannot tell: the offline reader)."""

    answer: str
    f1: float
    contained: bool
    abstained: bool | None = None


@runtime_checkable
class Reader(Protocol):
    """Reads ``context`` to answer ``question``; ``gold`` is ``None`` for a question the
    conversation does not answer. ``name`` is what the report records."""

    @property
    def name(self) -> str: ...

    def read(self, question: str, context: str, gold: str | None) -> Reading: ...


class SpanReader:
    """The offline reader: is the gold answer in the context, and how close does the
    context's best span come to it? Deterministic, needs no model; an upper bound of
    what a reader could answer from the context, not an answer of its own."""

    name = "span"

    def read(self, question: str, context: str, gold: str | None) -> Reading:
        if gold is None:
            return Reading("", 0.0, False, None)
        words, wanted = normalize(context), answer_tokens(gold)
        f1, (start, end) = best_span_f1(words, wanted)
        return Reading(" ".join(words[start:end]), f1, contains(words, wanted))

    def __repr__(self) -> str:
        return "SpanReader()"


READER_PROMPT = (
    "Answer the question using only the context, which is what you remember of a "
    "conversation with the user. Reply with the answer alone, in as few words as "
    f"possible. If the context does not say, reply: {_UNKNOWN}"
)


class ChatReader:
    """A LangChain chat model as the reader: it gets ``prompt`` as a system message and
    the context and the question as one human message, and its reply is the answer,
    scored against the gold answer by :func:`token_f1` and :func:`contains` on the
    normalised words. A reply of ``unknown`` abstains. Errors of the model call
    propagate."""

    def __init__(self, model: Any, *, prompt: str = READER_PROMPT, name: str | None = None):
        self.model = model
        self.prompt = prompt
        model_name = getattr(model, "model_name", None) or getattr(model, "model", None)
        self._name = name or f"chat:{model_name or type(model).__name__}"

    @property
    def name(self) -> str:
        """``"chat:<model name>"`` unless given."""
        return self._name

    def read(self, question: str, context: str, gold: str | None) -> Reading:
        from langchain_core.messages import HumanMessage, SystemMessage

        request = [
            SystemMessage(self.prompt),
            HumanMessage(f"Context:\n{context or '(nothing)'}\n\nQuestion: {question}"),
        ]
        answer = self.model.invoke(request).text.strip()
        words = normalize(answer)
        abstained = words == [_UNKNOWN] or not words
        if gold is None:
            return Reading(answer, 0.0, False, abstained)
        wanted = answer_tokens(gold)
        return Reading(answer, token_f1(words, wanted), contains(words, wanted), abstained)

    def __repr__(self) -> str:
        return f"ChatReader({self.model!r})"


def reader_from(spec: Reader | Any | str | None) -> Reader:
    """The reader ``spec`` names: ``None`` or ``"span"`` for :class:`SpanReader`; a
    ``"provider:model"`` string for that chat model (LangChain's ``init_chat_model``, with
    ``temperature=0``); a :class:`Reader` as it is; any other object is taken to be a
    LangChain chat model (:class:`ChatReader`).

    Raises:
        ConfigurationError: a string that is not ``provider:model``, or LangChain (or the
            provider's package) is not installed, or the model cannot be made.
    """
    if spec is None or spec == "span":
        return SpanReader()
    if isinstance(spec, str):
        provider, _, model = spec.partition(":")
        if not provider.strip() or not model.strip():
            raise ConfigurationError(
                f"a reader is 'span' or 'provider:model' (e.g. 'openai:gpt-4o-mini'), got {spec!r}"
            )
        try:  # LangChain is optional: imported only here, and typed as Any
            init_chat_model = importlib.import_module("langchain.chat_models").init_chat_model
        except ImportError as exc:
            raise ConfigurationError(
                f"the reader {spec!r} needs LangChain: pip install langchain "
                f"langchain-{provider.strip()}"
            ) from exc
        try:
            chat = init_chat_model(spec, temperature=0)
        except (ImportError, ValueError) as exc:
            raise ConfigurationError(f"cannot make the reader {spec!r}: {exc}") from exc
        return ChatReader(chat, name=f"chat:{spec}")
    if isinstance(spec, Reader):
        return spec
    return ChatReader(spec)

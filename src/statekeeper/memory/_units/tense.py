"""The tense of a time expression in a sentence: whether "Saturday" is the one before
or the one after the day it was said.

"Since" before it means the past and "for" ("a table for Friday") the future; else a
marker of tense in its sentence decides, the nearest one before it (the verb a date goes
with mostly comes first: "we met on Monday"), else the nearest after it ("On Monday we
met"): a future one ("will", "'ll", "going to", "gonna", "plan", "soon"...) or a past one
("was", "did", "had", an irregular past such as "went", a verb in "-ed" that is not
mostly an adjective, as "excited" is). A sentence with neither is in the present, which
with a date is a plan ("the movers come Saturday", "I'm starting on the first of the
month"): the future.
"""

from __future__ import annotations

import re
from typing import Literal

__all__ = ["Tense", "tense_of"]

Tense = Literal["past", "future"]


def _pattern(text: str) -> re.Pattern[str]:
    return re.compile(text, re.IGNORECASE)


def _words(text: str) -> list[str]:
    return text.split()


_FUTURE_MARKERS = _pattern(
    r"\b(?:will|shall|gonna|going to|about to|plan|plans|planning|scheduled|upcoming|soon"
    r"|hope to|hoping to|intend to|want to|wants to)\b|'ll\b|’ll\b"
)
_IRREGULAR_PAST = _words(
    """was were did had went got came saw made took gave met left ran won lost bought found
    told said felt kept began became brought sent spent thought wrote ate drove flew
    fell heard held paid sat slept spoke stood swam taught threw wore broke chose forgot
    sold built caught fought hid hurt led rode rang sang sank shook shot shut stole
    struck swore tore woke wasn't weren't didn't hadn't"""
)
_PAST_MARKERS = _pattern(r"\b(?:" + "|".join(_IRREGULAR_PAST) + r"|ago|yesterday)\b|\b\w{2,}ed\b")
# words in -ed that are adjectives or nouns more often than pasts: no tense of their own
_NOT_PAST = frozenset(
    _words(
        """need bed red shed wed sled seed feed speed breed weed indeed hundred sacred naked
        wicked beloved tired excited interested worried scared bored married engaged
        supposed used based located scheduled planned expected invited allowed required
        prepared pleased thrilled delighted determined surprised amazed annoyed stressed
        relaxed"""
    )
)
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")


def tense_of(text: str, start: int, end: int) -> Tense:
    """The tense of the expression at ``text[start:end]`` (see the module docstring)."""
    before = text[:start].rstrip().rsplit(maxsplit=1)
    word = before[-1].lower() if before else ""
    phrase = text[start:end].lower()
    if word == "since" or phrase.startswith("since "):
        return "past"
    if word == "for":
        return "future"
    sentence = next(
        (s for s in _SENTENCE.finditer(text) if s.start() <= start < s.end()),
        None,
    )
    if sentence is None:
        return "future"
    markers: list[tuple[int, Tense]] = []
    for match in _FUTURE_MARKERS.finditer(sentence[0]):
        markers.append((sentence.start() + match.start(), "future"))
    for match in _PAST_MARKERS.finditer(sentence[0]):
        if match[0].lower() not in _NOT_PAST:
            markers.append((sentence.start() + match.start(), "past"))
    before_it = [(pos, tense) for pos, tense in markers if pos < start]
    if before_it:  # the verb a date goes with mostly comes first: "we met on Monday"
        return max(before_it)[1]
    after_it = [(pos, tense) for pos, tense in markers if pos >= end]
    if after_it:  # "On Monday we met"
        return min(after_it)[1]
    return "future"  # the present with a date: a plan

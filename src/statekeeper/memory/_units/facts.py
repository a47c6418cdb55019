"""What fact a question asks about, read without a model: who, which attribute, and
whether it wants the current value or an earlier one.

The extractive summarizer keys a person's statement of a single-valued fact by its
``(subject, attribute)`` ("ana", "employer"; :func:`~statekeeper.memory._concepts.fact_key`),
and a chat-model summarizer may key its notes too. A question asks for such a fact in its
own words: "Who does Marcus work for now?" is ``employer`` of "marcus"; "What vehicle does
Ana have these days?" is ``car`` of "ana"; "Which city did Ana leave when she moved to
Toronto?" is an *earlier* ``home``. :func:`asked_fact` reads that, and
:meth:`AskedFact.matches` says whether a note is keyed by the fact asked, so recall can
rank the notes that state it first, and bring back the values they replaced when the
question asks about the past (:func:`predecessors`).

The words are common English, not the benchmark's: the attribute's own name and the
words a question about it is asked with (:data:`~statekeeper.memory._concepts.ASKED_WITH`),
compared as written (a stem would confuse "care" with "car"); a note whose attribute is
not in that vocabulary (a chat model's "favorite color") matches a question holding
every word of it.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from langgraph.store.base import BaseStore

from statekeeper.errors import SerializationError
from statekeeper.memory._concepts import ASKED_WITH
from statekeeper.memory.notes import Note, aware
from statekeeper.memory.store.query import entities

__all__ = ["AskedFact", "asked_fact", "predecessors"]

# words that ask for a value the fact had before the current one
_PAST = re.compile(
    r"\b(?:before|previous(?:ly)?|prior|former(?:ly)?|first|original(?:ly)?|used to|earlier"
    r"|leave|left|old|ex|had)\b",
    re.IGNORECASE,
)
# a person described rather than named ("the person Ana is surprising"): the names in the
# question are not whose fact it asks
_DESCRIBED = re.compile(
    r"\b(?:the|a|that|this)\s+(?:person|people|man|woman|one|guy|girl|someone|friend)\b",
    re.IGNORECASE,
)
_FOR_A_LIVING = re.compile(r"\bfor\s+a\s+living\b", re.IGNORECASE)
_RELATIVE = re.compile(
    r"\b(?P<name>[A-Z][\w-]*)(?:'s|’s)\s+(?P<relation>sister|brother|mother|mom|mum|father"
    r"|dad|son|daughter|wife|husband|partner|boyfriend|girlfriend|grandmother|grandfather"
    r"|grandma|grandpa)\b"
)
_POSSESSIVE = re.compile(r"['’]s$")
_CUES = {attribute: frozenset(words) for attribute, words in ASKED_WITH.items()}
_WORD = re.compile(r"[^\W\d_][\w'’-]*")
_MAX_CHAIN = 5  # earlier values followed back from one note


@dataclass(frozen=True)
class AskedFact:
    """The fact a question asks about: any of ``attributes`` (normalised names, such as
    ``"home"``; maybe none), of one of ``subjects`` (casefolded: ``"ana"``, ``"ana's
    brother"``), the current value or, with ``past``, an earlier one. ``words`` are the
    question's words as written (casefolded), for attributes outside the vocabulary."""

    attributes: frozenset[str]
    subjects: frozenset[str]
    past: bool
    words: frozenset[str]

    def matches(self, note: Note) -> bool:
        """Whether ``note`` is keyed by the fact asked: its subject is one named, and its
        attribute is one asked about (an allergy to anything counts as ``"allergy"``) or
        every word of it is in the question."""
        if note.subject is None or note.attribute is None or note.subject not in self.subjects:
            return False
        attribute = "allergy" if note.attribute.startswith("allergy to ") else note.attribute
        return attribute in self.attributes or set(attribute.split()) <= self.words


def asked_fact(question: str) -> AskedFact | None:
    """The fact ``question`` asks about, or ``None`` when it names no one: whose fact it
    is must be named. Its attributes are those whose words it uses
    (:data:`~statekeeper.memory._concepts.ASKED_WITH`; "do for a living" asks for an
    occupation), maybe none.

    Subjects are a name and its relative ("Ana's brother" -> ``"ana's brother"``), else
    the names it mentions (``"ana"``); a person described rather than named ("the person
    Ana is surprising") makes the question about no one it names: ``None``. ``past`` is
    set by words asking for an earlier value ("before", "first", "former", "used to",
    "left", "had"...)."""
    if _DESCRIBED.search(question):
        return None
    relatives = [
        f"{m['name'].casefold()}'s {m['relation'].casefold()}" for m in _RELATIVE.finditer(question)
    ]
    if relatives:
        subjects = frozenset(relatives)
    else:
        subjects = frozenset(_POSSESSIVE.sub("", name).casefold() for name in entities(question))
    if not subjects:
        return None
    question = _FOR_A_LIVING.sub(" occupation ", question)
    said = frozenset(word.casefold() for word in _WORD.findall(question))
    attributes = frozenset(attribute for attribute, cues in _CUES.items() if said & cues)
    return AskedFact(attributes, subjects, bool(_PAST.search(question)), said)


def predecessors(
    store: BaseStore, namespace: tuple[str, ...], note: Note, known_at: datetime.datetime
) -> Iterator[tuple[str, Note, dict[str, Any]]]:
    """The notes ``note`` replaced (``supersedes``, then theirs...), newest first, as
    ``(key, note, stored value)``: at most ``_MAX_CHAIN``, only those made by
    ``known_at``. A link to a note that cannot be read ends that branch."""
    pending = list(reversed(note.supersedes))
    seen: set[str] = set()
    while pending and len(seen) < _MAX_CHAIN:
        key = pending.pop()
        if key in seen:
            continue
        seen.add(key)
        item = store.get(namespace, key)
        if item is None:
            continue
        try:
            older = Note.from_value(item.value)
        except SerializationError:
            continue
        if aware(older.provenance.created_at) <= known_at:
            yield key, older, item.value
            pending.extend(reversed(older.supersedes))

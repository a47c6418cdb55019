"""Which notes a recall admits, and in what order: time (:class:`Window`, :class:`Decay`)
and the fact a question asks about.

Relevance decides whether a note is recalled at all (the floor); these rules decide
whether it may be (known and valid at the moment asked, young enough) and reorder the
relevant ones: the notes said in, or naming a day of, the time window a question names
come first; then, among those, the notes keyed by the fact the question asks about
(:mod:`.facts`); then by relevance, times freshness with a half-life. Session notes are
for questions asking what was said in a time window; repeated statements are left out
(:func:`distinct`). Reordering never admits a note the floor
refused.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from statekeeper.memory._units.facts import AskedFact
from statekeeper.memory.notes import Note, aware
from statekeeper.memory.store.query import TimeWindow

__all__ = ["Decay", "Ranked", "Window", "distinct", "in_window"]


class Ranked(Protocol):
    """What ranking reads of a hit."""

    @property
    def note(self) -> Note: ...

    @property
    def score(self) -> float: ...

    @property
    def freshness(self) -> float: ...


R = TypeVar("R", bound=Ranked)


@dataclass(frozen=True)
class Window:
    """The notes known and valid at ``at`` (all that were known, ``include_expired``)."""

    at: datetime.datetime
    include_expired: bool

    def admits(self, note: Note) -> bool:
        if aware(note.provenance.created_at) > self.at:
            return False  # made later: not known then
        return self.include_expired or note.valid_at(self.at)


@dataclass(frozen=True)
class Decay:
    """What age does to a note at ``at`` (too old to recall, or ranked lower), and what
    the question names: a time window (``named``), a fact (``asked``)."""

    at: datetime.datetime
    max_age: datetime.timedelta | None
    half_life: datetime.timedelta | None
    named: TimeWindow | None = None
    asked: AskedFact | None = None
    overview: bool = False  # the question asks what was said in the named window

    @property
    def reorders(self) -> bool:
        """Whether hits are ranked by more than relevance (so every relevant note is read)."""
        return self.half_life is not None or self.named is not None or self.asked is not None

    def admits(self, note: Note) -> bool:
        return self.max_age is None or note.observed_at >= self.at - self.max_age

    def freshness(self, note: Note) -> float:
        if self.half_life is None:
            return 1.0
        age = max(self.at - note.observed_at, datetime.timedelta(0))
        return float(0.5 ** (age / self.half_life))

    def best(self, hits: list[R], k: int) -> list[R]:
        """The ``k`` best :func:`distinct` hits: those in the named window first, then
        those keyed by the fact asked, then by relevance times freshness; ties keep their
        order. Session notes only for a question asking what was said in the named window
        (``overview``), the ones in it first, in the order said: they tell what was talked
        about when, and would otherwise stand in for the statements (or, from before a
        fact changed, tell its old value)."""
        named, asked, decays = self.named, self.asked, self.half_life is not None
        overview = self.overview and named is not None

        def rank(hit: R) -> tuple[bool, bool, bool, float]:
            outside = named is not None and not in_window(hit.note, named)
            session = overview and hit.note.unit == "session"
            other = asked is not None and not asked.matches(hit.note)
            when = hit.note.observed_at.timestamp() if session else 0.0
            weight = -hit.score * hit.freshness if decays else 0.0
            return outside, not session, other, when if session else weight

        ranked = sorted(hits, key=rank) if self.reorders else hits
        if named is None or not overview:
            return distinct([hit for hit in ranked if hit.note.unit != "session"], k)
        inside = [hit for hit in ranked if hit.note.unit != "session" or in_window(hit.note, named)]
        return distinct(inside, k, keep_sessions=True)


def distinct(ranked: Sequence[R], k: int, *, keep_sessions: bool = False) -> list[R]:
    """The first ``k`` of ``ranked`` that say something the others kept do not: a note
    whose text is one kept already (compared casefolded, without punctuation, an opening
    "so," / "anyway," / "by the way,"... or a speaker's name: small talk repeats itself)
    is left out, and so is a session note once a note of one of its statements is kept
    (the statement says it better), unless ``keep_sessions``."""
    kept: list[R] = []
    texts: set[str] = set()
    for hit in ranked:
        if len(kept) == k:
            break
        said = _said(hit.note.text)
        session = hit.note.unit == "session"
        if said in texts or (session and not keep_sessions and _covered(hit.note, kept)):
            continue
        texts.add(said)
        if not session and not keep_sessions:
            kept = [
                other
                for other in kept
                if not (other.note.unit == "session" and _covered(other.note, [hit]))
            ]
        kept.append(hit)
    return kept


def _covered(session: Note, hits: Sequence[Ranked]) -> bool:
    ids = set(session.provenance.message_ids)
    return any(
        hit.note.unit != "session" and ids.issuperset(hit.note.provenance.message_ids)
        for hit in hits
    )


_OPENING = re.compile(
    r"^(?:[^\s:]{1,40}:\s*)?(?:(?:so|anyway|also|oh|well|by the way|btw|okay|ok|and)\b[\s,]*)*",
    re.IGNORECASE,
)
_NOT_WORD = re.compile(r"[\W_]+")


def _said(text: str) -> str:
    return _NOT_WORD.sub(" ", _OPENING.sub("", text.casefold())).strip()


def in_window(note: Note, window: TimeWindow) -> bool:
    """Whether ``note`` was said in ``window``, or names a day in it ("last Tuesday")."""
    return window.holds(aware(note.observed_at)) or any(
        window.meets(span.start, span.end) for span in note.dates
    )

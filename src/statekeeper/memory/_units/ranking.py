"""Which notes a recall admits, and in what order: time (:class:`Window`, :class:`Decay`)
and the fact a question asks about.

Relevance decides whether a note is recalled at all (the floor); these rules decide
whether it may be (known and valid at the moment asked, young enough) and reorder the
relevant ones: the notes said in, or naming a day of, the time window a question names
come first; then, among those, the notes keyed by the fact the question asks about
(:mod:`.facts`); then by relevance, times freshness with a half-life. Reordering never
admits a note the floor refused.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Protocol, TypeVar

from statekeeper.memory._units.facts import AskedFact
from statekeeper.memory.notes import Note, aware
from statekeeper.memory.store.query import TimeWindow

__all__ = ["Decay", "Ranked", "Window", "in_window"]


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
        """The ``k`` best hits: those in the named window first, then those keyed by the
        fact asked, then by relevance times freshness; ties keep their order."""
        named, asked, decays = self.named, self.asked, self.half_life is not None

        def rank(hit: R) -> tuple[bool, bool, float]:
            outside = named is not None and not in_window(hit.note, named)
            other = asked is not None and not asked.matches(hit.note)
            return outside, other, -hit.score * hit.freshness if decays else 0.0

        return sorted(hits, key=rank)[:k] if self.reorders else hits[:k]


def in_window(note: Note, window: TimeWindow) -> bool:
    """Whether ``note`` was said in ``window``, or names a day in it ("last Tuesday")."""
    return window.holds(aware(note.observed_at)) or any(
        window.meets(span.start, span.end) for span in note.dates
    )

"""What a recall asks: its option objects (:class:`Limits`, :class:`Freshness`,
:class:`Hops`, re-exported by :mod:`statekeeper.memory.recall`), and what a query names
beyond its terms, without a model: the entities a second retrieval round follows
(multi-hop), and the time window a question asks about.

The readings are pure functions of text, shared by :func:`statekeeper.memory.recall`
whatever the store, so a given query is read the same way on every backend.

**Entities** (:func:`entities`): the capitalised words and runs of words of a text
("Karim", "Northwind Logistics"), minus a speaker label ("Ana: ..."), the stopwords of
:mod:`~statekeeper.memory.store.lexical` and the names given in ``exclude``; a word that
only opens a sentence counts too ("Biscuit swallowed a sock"), unless it is a stopword.

**Time windows** (:func:`time_window`): "today", "yesterday", "last week", "this month",
"last month", "last year", "N days/weeks/months ago", "in March" (the latest March up to
the moment asked), "in March 2024", "on 2024-04-26" (or "26 April 2024", "April 26,
2024"), each resolved against the moment the question is asked (recall's ``as_of``) to
a half-open interval ``[start, end)`` in that moment's timezone.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from langchain_core.messages.utils import count_tokens_approximately

from statekeeper.errors import ConfigurationError
from statekeeper.memory.store.lexical import STOPWORDS, terms

__all__ = [
    "DEFAULT_MIN_SCORE",
    "Clock",
    "Freshness",
    "Hops",
    "Limits",
    "TimeWindow",
    "entities",
    "hop_query",
    "merge_hops",
    "time_window",
]

T = TypeVar("T")

#: The relevance floor. Measured on a hand-labelled set of 40 notes of one person's memory
#: and 67 queries (38 questions, 12 chat turns, 17 about nothing stored): at 0.3 lexical
#: recall keeps 86% of the relevant notes at 86% precision, the best F1 of the floors
#: tried, and it is the lowest floor at which no unrelated query gets a note. On the dev
#: split of ``benchmarks/memory`` it beats raw-message BM25 on Hit@5 and MRR with about a
#: third of its tokens. See ``docs/memory-store.md``.
DEFAULT_MIN_SCORE = 0.3


_SPEAKER = re.compile(r"^\s*[^\s:]{1,40}:\s")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"[^\W\d_][\w'’-]*")

_MONTHS = (
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
)  # fmt: skip
_MONTH = "(?P<month>" + "|".join(_MONTHS) + ")"
_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5,
    "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
}  # fmt: skip
_UNIT = "(?P<unit>day|week|month|year)"

# One pattern per kind of expression, tried in this order; the first match wins.
_ISO_DAY = re.compile(r"\b(?P<y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})\b")
_DAY_MONTH = re.compile(
    r"\b(?P<d>\d{1,2})(?:st|nd|rd|th)? (?:of )?" + _MONTH + r",? (?P<y>\d{4})\b", re.I
)
_MONTH_DAY = re.compile(r"\b" + _MONTH + r" (?P<d>\d{1,2})(?:st|nd|rd|th)?,? (?P<y>\d{4})\b", re.I)
_MONTH_YEAR = re.compile(r"\b(?:in|during|of|since) " + _MONTH + r"(?: (?P<y>\d{4}))?\b", re.I)
_AGO = re.compile(r"\b(?P<n>\d+|" + "|".join(_NUMBERS) + r") " + _UNIT + r"s? ago\b", re.I)
_LAST = re.compile(r"\b(?P<dir>last|this|past) " + _UNIT + r"\b", re.I)
_DAY = re.compile(r"\b(?P<day>today|yesterday)\b", re.I)


# -- the options of a recall ------------------------------------------------------------

Clock = Callable[[], datetime.datetime]
"""Returns the current time, timezone-aware."""


def utcnow() -> datetime.datetime:
    """The current time in UTC: the default clock."""
    return datetime.datetime.now(datetime.UTC)


def _moment(moment: object) -> datetime.datetime:
    if not isinstance(moment, datetime.datetime) or moment.utcoffset() is None:
        raise ConfigurationError(f"as_of must be a timezone-aware datetime, got {moment!r}")
    return moment


def check_options(k: object, min_score: object) -> None:
    """Refuse a ``k`` below 1 or a ``min_score`` outside [0, 1] (ConfigurationError)."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ConfigurationError(f"k must be an integer >= 1, got {k!r}")
    if (
        not isinstance(min_score, int | float)
        or isinstance(min_score, bool)
        or not (math.isfinite(min_score) and 0.0 <= min_score <= 1.0)
    ):
        raise ConfigurationError(f"min_score must be a number in [0, 1], got {min_score!r}")


def check_freshness(max_age: object, half_life: object) -> None:
    """Refuse a ``max_age`` or ``half_life`` that is neither ``None`` nor a positive
    ``timedelta`` (ConfigurationError)."""
    for name, span in (("max_age", max_age), ("half_life", half_life)):
        if span is not None and (
            not isinstance(span, datetime.timedelta) or span <= datetime.timedelta(0)
        ):
            raise ConfigurationError(f"{name} must be a positive timedelta, got {span!r}")


@dataclass(frozen=True)
class Limits:
    """What recall may return: at most ``k`` notes, each scoring at least ``min_score``
    (and above 0), among the items that match ``filter`` (a LangGraph store filter, as in
    ``store.search``; ``None``: every note). With ``hops`` (a :class:`Hops`, by default
    ``Hops()``; ``None``: one round), a second round seeded by the names in the first
    round's best hits may add a few notes, within the same ``k`` and floor: on the dev
    split of ``benchmarks/memory`` it finds the second hop of multi-hop questions and
    changes no other kind's hits (``docs/memory-eval.md``).

    Raises:
        ConfigurationError: ``k`` is not an integer >= 1, or ``min_score`` is not a number
            in [0, 1].
    """

    k: int = 5
    min_score: float = DEFAULT_MIN_SCORE
    filter: Mapping[str, Any] | None = None
    hops: Hops | None = dataclasses.field(default_factory=lambda: Hops())

    def __post_init__(self) -> None:
        check_options(self.k, self.min_score)
        if self.hops is not None and not isinstance(self.hops, Hops):
            raise ConfigurationError(f"hops must be a Hops or None, got {self.hops!r}")


@dataclass(frozen=True)
class Freshness:
    """The moment recall answers as of, and what age does to a note.

    ``as_of`` (timezone-aware; ``None``: ``clock()`` at each recall) selects what was known
    and held then; ``include_expired`` also admits notes superseded or expired by then;
    ``max_age`` drops notes said (``observed_at``) longer than that before ``as_of``;
    ``half_life`` ranks notes by relevance times ``0.5 ** (age / half_life)``. ``clock``
    gives the current time (timezone-aware): the default ``as_of`` and the time of the
    recall's log entry. ``windows`` (default ``True``): a query naming a time window
    ("last week", "in March 2024", "on 2024-04-26", "two weeks ago", resolved against
    ``as_of``) ranks the notes said in it (``observed_at``), or naming a day in it, before
    the others. ``facts`` (default ``True``): a question asking for a fact of a person it
    names ("Who does Ana work for now?") ranks the notes keyed by that fact first and
    recalls them by their key even when its words miss them (scored at least
    ``DEFAULT_MIN_SCORE``, never below the floor); one asking for an earlier value
    ("before", "first", "used to"...) also gets, before each, the values it replaced.
    See :func:`recall` for the exact rules.

    Raises:
        ConfigurationError: ``as_of`` is not a timezone-aware datetime, ``max_age`` or
            ``half_life`` is not a positive ``timedelta``, or ``windows`` or ``facts`` is
            not a bool.
    """

    as_of: datetime.datetime | None = None
    include_expired: bool = False
    max_age: datetime.timedelta | None = None
    half_life: datetime.timedelta | None = None
    clock: Clock = utcnow
    windows: bool = True
    facts: bool = True

    def __post_init__(self) -> None:
        if self.as_of is not None:
            _moment(self.as_of)
        check_freshness(self.max_age, self.half_life)
        for name in ("windows", "facts"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigurationError(
                    f"{name} must be True or False, got {getattr(self, name)!r}"
                )

    def moment(self) -> datetime.datetime:
        """``as_of``, else the clock's time, checked to be timezone-aware."""
        return _moment(self.as_of if self.as_of is not None else self.clock())


# -- what a query names --------------------------------------------------------------------


def entities(text: str, exclude: Iterable[str] = ()) -> list[str]:
    """The names ``text`` mentions, in order, each once: runs of capitalised words, minus
    a leading speaker label, stopwords and the names in ``exclude`` (compared casefolded).
    """
    excluded = {name.casefold() for name in exclude}
    body = _SPEAKER.sub("", text, count=1)
    found: dict[str, None] = {}
    for sentence in _SENTENCE.split(body):
        run: list[str] = []
        for word in (*_WORD.findall(sentence), ""):
            folded = word.casefold()
            if word[:1].isupper() and folded not in STOPWORDS and terms(word):
                run.append(word)
                continue
            if run:
                name = " ".join(run)
                if name.casefold() not in excluded:
                    found.setdefault(name, None)
                run = []
    return list(found)


@dataclass(frozen=True)
class Hops:
    """A second retrieval round, for questions whose answer is one note away from the
    notes they name ("Which city did Ana fly to when visiting Karim?": the booking names
    Karim, the note saying where Karim lives names the city).

    The names (:func:`entities`) in the ``seeds`` best hits of the first round are the
    second round's query; of the notes it finds above the same relevance floor, not
    already hits, at most ``max_notes`` are added, totalling at most ``max_tokens``
    tokens (``count_tokens_approximately`` of their texts). Each is scored the lower of
    its own score and its seeds', and the best ``k`` of all hits are returned: the
    second round never returns more notes than ``k``, never a note below the floor, and
    nothing when the first round found nothing.

    Raises:
        ConfigurationError: a field is not an integer >= 1.
    """

    seeds: int = 2
    max_notes: int = 2
    max_tokens: int = 120

    def __post_init__(self) -> None:
        for name in ("seeds", "max_notes", "max_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigurationError(f"Hops.{name} must be an integer >= 1, got {value!r}")


def hop_query(texts: Iterable[str]) -> str:
    """The second round's query: the names of ``texts`` (each once, in order); ``""``
    for none."""
    names: dict[str, None] = {}
    for text in texts:
        names.update(dict.fromkeys(entities(text)))
    return " ".join(names)


def merge_hops(found: Sequence[T], text: Callable[[T], str], hops: Hops) -> list[T]:
    """The first of ``found`` (the second round's new notes, best first) within the
    bounds of ``hops``: at most ``max_notes``, at most ``max_tokens`` tokens in all; a
    note that would overflow the tokens is skipped for a shorter one after it."""
    kept: list[T] = []
    spent = 0
    for item in found:
        if len(kept) == hops.max_notes:
            break
        cost = count_tokens_approximately([text(item)])
        if spent + cost <= hops.max_tokens:
            kept.append(item)
            spent += cost
    return kept


@dataclass(frozen=True)
class TimeWindow:
    """The time a question names: ``[start, end)``, and the words that named it."""

    start: datetime.datetime
    end: datetime.datetime
    phrase: str

    def holds(self, moment: datetime.datetime) -> bool:
        """Whether ``moment`` (timezone-aware) falls in the window."""
        return self.start <= moment < self.end

    def meets(self, first: datetime.date, end: datetime.date) -> bool:
        """Whether the calendar days ``[first, end)`` (midnight to midnight in the
        window's timezone) share a moment with the window."""
        return _midnight(first, self.start) < self.end and _midnight(end, self.start) > self.start


def time_window(query: str, at: datetime.datetime) -> TimeWindow | None:
    """The time window ``query`` names, resolved against ``at`` (timezone-aware: the
    moment the question is asked); ``None`` when it names none (or an impossible date)."""
    try:
        return _window(query, at)
    except ValueError:  # "2024-02-31", "31 April 2024": no such day, no window
        return None


def _window(query: str, at: datetime.datetime) -> TimeWindow | None:
    today = at.date()
    if match := _ISO_DAY.search(query):
        day = datetime.date(int(match["y"]), int(match["m"]), int(match["d"]))
        return _days(match[0], day, 1, at)
    for pattern in (_DAY_MONTH, _MONTH_DAY):
        if match := pattern.search(query):
            month = _MONTHS.index(match["month"].lower()) + 1
            day = datetime.date(int(match["y"]), month, int(match["d"]))
            return _days(match[0], day, 1, at)
    if match := _MONTH_YEAR.search(query):
        month = _MONTHS.index(match["month"].lower()) + 1
        if match["y"]:
            year = int(match["y"])
        else:  # the latest such month up to the moment asked
            year = today.year if month <= today.month else today.year - 1
        return _months(match[0], year * 12 + month - 1, at)
    if match := _AGO.search(query):
        n = int(match["n"]) if match["n"].isdigit() else _NUMBERS[match["n"].lower()]
        return _unit(match[0], match["unit"].lower(), -n, at)
    if match := _LAST.search(query):
        step = -1 if match["dir"].lower() == "last" else 0
        if match["dir"].lower() == "past":  # "the past week": the seven days up to now
            return _back(match[0], match["unit"].lower(), at)
        return _unit(match[0], match["unit"].lower(), step, at)
    if match := _DAY.search(query):
        shift = -1 if match["day"].lower() == "yesterday" else 0
        return _days(match[0], today + datetime.timedelta(days=shift), 1, at)
    return None


def _midnight(day: datetime.date, at: datetime.datetime) -> datetime.datetime:
    return datetime.datetime.combine(day, datetime.time(), tzinfo=at.tzinfo)


def _days(phrase: str, first: datetime.date, n: int, at: datetime.datetime) -> TimeWindow:
    start = _midnight(first, at)
    return TimeWindow(start, start + datetime.timedelta(days=n), phrase)


def _months(phrase: str, index: int, at: datetime.datetime) -> TimeWindow:
    first = datetime.date(index // 12, index % 12 + 1, 1)
    following = datetime.date((index + 1) // 12, (index + 1) % 12 + 1, 1)
    return TimeWindow(_midnight(first, at), _midnight(following, at), phrase)


def _unit(phrase: str, unit: str, shift: int, at: datetime.datetime) -> TimeWindow:
    """The calendar ``unit`` holding ``at``, moved by ``shift`` units."""
    today = at.date()
    if unit == "day":
        return _days(phrase, today + datetime.timedelta(days=shift), 1, at)
    if unit == "week":
        monday = today - datetime.timedelta(days=today.weekday()) + datetime.timedelta(weeks=shift)
        return _days(phrase, monday, 7, at)
    if unit == "month":
        return _months(phrase, today.year * 12 + today.month - 1 + shift, at)
    year = today.year + shift
    return TimeWindow(
        _midnight(datetime.date(year, 1, 1), at),
        _midnight(datetime.date(year + 1, 1, 1), at),
        phrase,
    )


def _back(phrase: str, unit: str, at: datetime.datetime) -> TimeWindow:
    span = {"day": 1, "week": 7, "month": 31, "year": 366}[unit]
    return TimeWindow(
        at - datetime.timedelta(days=span), at + datetime.timedelta(seconds=1), phrase
    )

"""Time expressions resolved against the moment they were said.

"I adopted a cat yesterday", said on 2024-05-08, is about 2024-05-07; "the movers come
Saturday" about the Saturday after; "we moved in March" about March 2024.
:func:`resolve` finds such expressions in a text and returns each as a :class:`TimeSpan`:
its words and the calendar days it names, a half-open range ``[start, end)``.
:func:`annotate` also writes what each relative one means after it ("yesterday
(2024-05-07)"), unless it is the day said ("today"), so a note says it in words any reader
or index sees.

The rules, deterministic and offline:

- **The anchor** is the calendar day of the timestamp in its own timezone: "yesterday"
  said at 00:30+02:00 on 8 May is 7 May, whatever the day in UTC. A naive timestamp is
  read as written; a ``date`` is the day itself.
- **Days**: today, tonight, this morning/afternoon/evening, last night, yesterday,
  tomorrow, the day before yesterday, the day after tomorrow.
- **Units**: last/this/next/coming/past week, weekend, month, year (a week runs Monday
  to Sunday, a weekend is its Saturday and Sunday, "the past week" the seven days up to
  the day said); "N days/weeks/months/years ago"; "in N days/..." and "N days/... from
  now" (N a number up to 9999, or a word: a, an, one to twelve, a couple of). "Over /
  on / at the weekend" goes by tense (below).
- **Weekdays**: "last Tuesday" is the latest Tuesday before the day said, "next
  Tuesday" the first after it, "this Tuesday" the one of its week; a bare "(on)
  Tuesday" goes by tense, and may be the day said itself.
- **Months**: "March 2024"; "in/since/until/during/early/mid/late/of March", "last
  March" (the latest before the month said), "next March", "this March" (its year);
  "5 March", "the 5th of March", "March 5th", with or without a year. "May" is a month
  only capitalised ("I may go" is not).
- **Days of the month**: "on the 5th", "the 5th of the month", "the first of the
  month", by tense.
- **Absolute dates** ("2024-05-07", "in 2023") are spans too, never annotated.

**Tense** (:mod:`.tense`), for an expression with no direction of its own: the past is
the latest such day up to the day said, the future the first from it on; a sentence in
the present with a date is a plan, the future ("the movers come Saturday").

**What is left alone**: ambiguous words ("may" in lower case, "March" with no
preposition, "the 5th" with neither "on" nor "of the month", "in two days" in a sentence
in the past: a duration), and impossible or out-of-range dates ("31 February 2024", "on
the 31st" with no such day within two months, "9999 years from now"): no span, the text
unchanged; a day that does not exist keeps the month it names ("31 February 2024" is
February 2024). An expression already followed by its label is not labelled again.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from statekeeper.memory._units.expressions import DAY, MONTH_NAMES, matches, month_start

__all__ = ["TimeSpan", "anchor_day", "annotate", "resolve"]

# -- spans ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TimeSpan:
    """A time expression of a text and the days it names: ``[start, end)``.

    ``phrase`` is the expression as written, at ``position`` in the text; ``relative``
    says whether it needed the day it was said to be understood (what :func:`annotate`
    labels)."""

    phrase: str
    start: datetime.date
    end: datetime.date
    position: int
    relative: bool = True

    @property
    def label(self) -> str:
        """The days in words: ``"2024-05-07"``, ``"week of 2024-04-29"``, ``"weekend of
        2024-05-04"``, ``"April 2024"``, ``"2024"``, else ``"2024-05-01 to 2024-05-07"``."""
        days = (self.end - self.start).days
        if days == 1:
            return self.start.isoformat()
        if days == 7 and self.start.weekday() == 0:
            return f"week of {self.start.isoformat()}"
        if days == 2 and self.start.weekday() == 5:
            return f"weekend of {self.start.isoformat()}"
        if self.start.day == 1 and self.end == month_start(self.start, 1):
            return f"{MONTH_NAMES[self.start.month - 1].capitalize()} {self.start.year}"
        if (self.start.month, self.start.day) == (1, 1) and (
            self.end.year,
            self.end.month,
            self.end.day,
        ) == (self.start.year + 1, 1, 1):
            return str(self.start.year)
        return f"{self.start.isoformat()} to {(self.end - DAY).isoformat()}"

    @property
    def months(self) -> tuple[datetime.date, ...]:
        """The first day of every calendar month the span touches (at most 13)."""
        found: list[datetime.date] = []
        month = self.start.replace(day=1)
        while month < self.end and len(found) < 13:
            found.append(month)
            month = month_start(month, 1)
        return tuple(found)


def anchor_day(said: datetime.datetime | datetime.date) -> datetime.date:
    """The calendar day ``said`` falls on for whoever said it: a timestamp's date in its
    own timezone (naive: as written); a date as it is."""
    return said.date() if isinstance(said, datetime.datetime) else said


def resolve(text: str, said: datetime.datetime | datetime.date) -> list[TimeSpan]:
    """The time expressions of ``text`` resolved against when it was ``said``, in order
    of position, none overlapping another (the earliest, then the longest, wins)."""
    found: list[tuple[int, int, TimeSpan]] = []
    for match, (first, after, relative) in matches(text, anchor_day(said)):
        span = TimeSpan(match[0], first, after, match.start(), relative)
        found.append((match.start(), match.end(), span))
    kept: list[tuple[int, int, TimeSpan]] = []
    for start, end, span in sorted(found, key=lambda f: (f[0], f[0] - f[1])):
        if all(end <= other_start or start >= other_end for other_start, other_end, _ in kept):
            kept.append((start, end, span))
    return [span for _, _, span in sorted(kept, key=lambda k: k[0])]


def annotate(text: str, said: datetime.datetime | datetime.date) -> tuple[str, list[TimeSpan]]:
    """``text`` with each relative expression that names other days than the one said
    followed by its label in parentheses ("yesterday" -> "yesterday (2024-05-07)"; not
    again if it already is), and the spans of :func:`resolve` (all of them). "Today" or
    "this morning" stay as they are: the day a note was said is in its provenance, and a
    label would only cost tokens (measured on ``benchmarks/memory``'s dev split)."""
    today = anchor_day(said)
    spans = resolve(text, said)
    pieces: list[str] = []
    done = 0
    for span in spans:
        end = span.position + len(span.phrase)
        label = f" ({span.label})"
        that_day = span.start == today and span.end == today + DAY
        if not span.relative or that_day or text[end:].startswith((label, label[1:])):
            continue
        pieces.extend((text[done:end], label))
        done = end
    pieces.append(text[done:])
    return "".join(pieces), spans

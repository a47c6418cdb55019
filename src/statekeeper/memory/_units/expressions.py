"""The time expressions :mod:`.temporal` reads, each a pattern and what it means: the
days it names, resolved against the day it was said (and the tense of its sentence, for
those with no direction of their own: :mod:`.tense`).

:func:`matches` runs only the rules whose words a text holds: most statements name no
time, and one look at their words skips every pattern.
"""

from __future__ import annotations

import calendar
import datetime
import re
from collections.abc import Callable, Iterator

from statekeeper.memory._units.tense import Tense, tense_of

__all__ = ["DAY", "MONTH_NAMES", "Days", "matches", "month_start"]

DAY = _DAY = datetime.timedelta(days=1)

MONTH_NAMES = _MONTH_NAMES = (
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
)  # fmt: skip
_ABBREVIATIONS = {
    "jan": 1, "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7, "aug": 8,
    "sep": 9, "sept": 9, "oct": 10, "nov": 11, "dec": 12,
}  # fmt: skip
_MONTHS = {name: number for number, name in enumerate(_MONTH_NAMES, start=1)} | _ABBREVIATIONS
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NUMBERS = {
    "a couple of": 2, "a couple": 2, "couple of": 2, "a": 1, "an": 1, "one": 1, "two": 2,
    "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
    "ten": 10, "eleven": 11, "twelve": 12,
}  # fmt: skip
_ORDINALS = {
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6,
    "seventh": 7, "eighth": 8, "ninth": 9, "tenth": 10,
}  # fmt: skip

_FULL_MONTH = "(?P<month>" + "|".join(_MONTH_NAMES) + ")"
_ANY_MONTH = "(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_WEEKDAY = "(?P<weekday>" + "|".join(_WEEKDAYS) + ")"
_NUMBER = r"(?P<n>\d{1,4}|" + "|".join(sorted(_NUMBERS, key=len, reverse=True)) + ")"
_UNIT = r"(?P<unit>day|week|month|year)s?"
_ORDINAL = r"(?P<d>\d{1,2})(?:st|nd|rd|th)?"


def _pattern(text: str) -> re.Pattern[str]:
    return re.compile(text, re.IGNORECASE)


# -- the rules -----------------------------------------------------------------------------

Days = tuple[datetime.date, datetime.date, bool]  # [start, end), relative
Rule = Callable[[re.Match[str], datetime.date, str], Days | None]


def _one(day: datetime.date, relative: bool = True) -> Days:
    return day, day + _DAY, relative


def month_start(day: datetime.date, shift: int) -> datetime.date:
    """The first day of the month ``shift`` months from the one holding ``day``."""
    index = day.year * 12 + day.month - 1 + shift
    return datetime.date(index // 12, index % 12 + 1, 1)


def _month(first: datetime.date, relative: bool = True) -> Days:
    return first, month_start(first, 1), relative


def _week(day: datetime.date) -> Days:
    monday = day - day.weekday() * _DAY
    return monday, monday + 7 * _DAY, True


def _year(year: int, relative: bool = True) -> Days:
    return datetime.date(year, 1, 1), datetime.date(year + 1, 1, 1), relative


def _weekend(saturday: datetime.date) -> Days:
    return saturday, saturday + 2 * _DAY, True


def _count(word: str) -> int:
    word = " ".join(word.lower().split())
    return int(word) if word.isdigit() else _NUMBERS[word]


def _latest_saturday(today: datetime.date) -> datetime.date:
    return today - (today.weekday() - 5) % 7 * _DAY


def _days_word(match: re.Match[str], today: datetime.date, _text: str) -> Days:
    word = " ".join(match[0].lower().split())
    shift = {
        "the day before yesterday": -2,
        "yesterday": -1,
        "last night": -1,
        "tomorrow": 1,
        "the day after tomorrow": 2,
    }.get(word, 0)
    return _one(today + shift * _DAY)


def _weekday_with(match: re.Match[str], today: datetime.date, _text: str) -> Days:
    target = _WEEKDAYS.index(match["weekday"].lower())
    direction = match["dir"].lower()
    if direction == "this":
        return _one(today - today.weekday() * _DAY + target * _DAY)
    if direction == "last":
        return _one(today - ((today.weekday() - target) % 7 or 7) * _DAY)
    return _one(today + ((target - today.weekday()) % 7 or 7) * _DAY)  # next, coming


def _weekday(match: re.Match[str], today: datetime.date, text: str) -> Days:
    target = _WEEKDAYS.index(match["weekday"].lower())
    if tense_of(text, match.start(), match.end()) == "past":
        return _one(today - (today.weekday() - target) % 7 * _DAY)
    return _one(today + (target - today.weekday()) % 7 * _DAY)


def _unit_with(match: re.Match[str], today: datetime.date, _text: str) -> Days:
    direction, unit = match["dir"].lower(), match["unit"].lower()
    if direction == "past":  # the span up to the day said
        length = {"week": 7, "weekend": 2, "month": 30, "year": 365}[unit]
        return today - (length - 1) * _DAY, today + _DAY, True
    step = {"last": -1, "this": 0}.get(direction, 1)  # next, coming
    if unit == "week":
        return _week(today + 7 * step * _DAY)
    if unit == "weekend":
        if step == 0:
            return _weekend(today - today.weekday() * _DAY + 5 * _DAY)
        saturday = _latest_saturday(today)
        if today.weekday() >= 5 or step > 0:
            saturday += 7 * step * _DAY
        return _weekend(saturday)
    if unit == "month":
        return _month(month_start(today, step))
    return _year(today.year + step)


def _the_weekend(match: re.Match[str], today: datetime.date, text: str) -> Days:
    saturday = _latest_saturday(today)
    if tense_of(text, match.start(), match.end()) == "future" and saturday < today:
        saturday += 7 * _DAY
    return _weekend(saturday)


def _shifted(today: datetime.date, unit: str, n: int) -> Days:
    if unit == "day":
        return _one(today + n * _DAY)
    if unit == "week":
        return _week(today + 7 * n * _DAY)
    if unit == "month":
        return _month(month_start(today, n))
    return _year(today.year + n)


def _ago(match: re.Match[str], today: datetime.date, _text: str) -> Days:
    return _shifted(today, match["unit"].lower(), -_count(match["n"]))


def _ahead(match: re.Match[str], today: datetime.date, text: str) -> Days | None:
    if match[0].lower().startswith(("in ", "within ")) and (
        tense_of(text, match.start(), match.end()) == "past"
    ):
        return None  # "I read it in two days": a duration, not a date
    return _shifted(today, match["unit"].lower(), _count(match["n"]))


def _month_number(match: re.Match[str]) -> int | None:
    name = match["month"]
    if name.lower() == "may" and not name[0].isupper():
        return None  # "I may go": a verb
    return _MONTHS[name.lower().rstrip(".")]


def _month_by_tense(month: int, today: datetime.date, tense: Tense) -> datetime.date:
    year = today.year
    if tense == "past" and month > today.month:
        year -= 1
    elif tense == "future" and month < today.month:
        year += 1
    return datetime.date(year, month, 1)


def _named_month(match: re.Match[str], today: datetime.date, text: str) -> Days | None:
    month = _month_number(match)
    if month is None:
        return None
    word = match["dir"].lower()
    if word == "last":
        year = today.year if month < today.month else today.year - 1
        return _month(datetime.date(year, month, 1))
    if word == "next":
        year = today.year if month > today.month else today.year + 1
        return _month(datetime.date(year, month, 1))
    if word == "this":
        return _month(datetime.date(today.year, month, 1))
    if word == "since":
        tense: Tense = "past"
    elif word in ("until", "till", "by", "before"):
        tense = "future"
    else:
        tense = tense_of(text, match.start(), match.end())
    return _month(_month_by_tense(month, today, tense))


def _month_year(match: re.Match[str], _today: datetime.date, _text: str) -> Days | None:
    month = _month_number(match)
    if month is None:
        return None
    return _month(datetime.date(int(match["y"]), month, 1), relative=False)


def _day_of_month(
    day: int, month: int | None, year: int | None, today: datetime.date, tense: Tense
) -> datetime.date | None:
    """The day ``day`` of ``month`` (``None``: any) of ``year`` (``None``: by ``tense``,
    the latest up to ``today`` or the first from it), if it exists within a year."""
    if year is not None and month is not None:
        return datetime.date(year, month, day)
    step = -1 if tense == "past" else 1
    first = today.replace(day=1)
    for shift in range(13):
        candidate_month = month_start(first, step * shift)
        if month is not None and candidate_month.month != month:
            continue
        if month is None and shift > 2:
            return None  # "on the 31st": no month near enough has it
        if day > calendar.monthrange(candidate_month.year, candidate_month.month)[1]:
            continue
        candidate = candidate_month.replace(day=day)
        if (tense == "past" and candidate <= today) or (tense == "future" and candidate >= today):
            return candidate
    return None


def _dated(match: re.Match[str], today: datetime.date, text: str) -> Days | None:
    month = _month_number(match)
    if month is None:
        return None
    year = int(match["y"]) if match["y"] else None
    tense = tense_of(text, match.start(), match.end())
    day = _day_of_month(int(match["d"]), month, year, today, tense)
    return _one(day, relative=year is None) if day is not None else None


def _of_the_month(match: re.Match[str], today: datetime.date, text: str) -> Days | None:
    word = match["d"].lower()
    number = _ORDINALS.get(word) or int(re.sub(r"\D", "", word))
    if not 1 <= number <= 31:
        return None
    day = _day_of_month(number, None, None, today, tense_of(text, match.start(), match.end()))
    return _one(day) if day is not None else None


def _iso(match: re.Match[str], _today: datetime.date, _text: str) -> Days:
    return _one(datetime.date(int(match["y"]), int(match["m"]), int(match["d"])), False)


def _a_year(match: re.Match[str], _today: datetime.date, _text: str) -> Days:
    return _year(int(match["y"]), relative=False)


_DIGIT = "#"  # what a text holds when a rule needs a digit
_UNITS = frozenset({"day", "days", "week", "weeks", "month", "months", "year", "years"})
_DAY_WORDS = frozenset({"yesterday", "today", "tonight", "tomorrow", "morning", "afternoon"})
_DAY_WORDS |= {"evening", "night"}
_WEEKDAY_WORDS = frozenset(_WEEKDAYS)
_MONTH_WORDS = frozenset(_MONTHS)
_FULL_MONTHS = frozenset(_MONTH_NAMES)
_NUMERALS = frozenset({_DIGIT, *(word.split()[-1] for word in _NUMBERS)})
_LETTERS = re.compile(r"[a-z]+")
_A_DIGIT = re.compile(r"\d")
Need = tuple[frozenset[str], ...]  # a rule applies when the text has a word of each set

# (what a rule needs, its pattern, what it means); the needs let a text skip the rules it
# cannot match (most statements name no time) with one look at its words
_RULES: list[tuple[Need, re.Pattern[str], Rule]] = [
    (
        (frozenset({_DIGIT}),),
        re.compile(r"\b(?P<y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})\b"),
        _iso,
    ),
    (
        (frozenset({_DIGIT}), _MONTH_WORDS),
        _pattern(
            r"\b(?:the\s+)?"
            + _ORDINAL
            + r"\s+(?:of\s+)?"
            + _ANY_MONTH
            + r"(?:,?\s+(?P<y>\d{4}))?\b"
        ),
        _dated,
    ),
    (
        (frozenset({_DIGIT}), _MONTH_WORDS),
        _pattern(r"\b" + _ANY_MONTH + r"\s+" + _ORDINAL + r"(?:,?\s+(?P<y>\d{4}))?\b"),
        _dated,
    ),
    (
        (frozenset({_DIGIT}), _FULL_MONTHS),
        _pattern(r"\b" + _FULL_MONTH + r",?\s+(?P<y>\d{4})\b"),
        _month_year,
    ),
    (
        (_FULL_MONTHS,),
        _pattern(
            r"\b(?P<dir>last|next|this|in|since|until|till|by|before|during|of|early|mid|late)"
            r"[\s-]+" + _FULL_MONTH + r"\b(?!,?\s+\d{4}\b|\s+\d{1,2}(?:st|nd|rd|th)?\b)"
        ),
        _named_month,
    ),
    (
        (frozenset({_DIGIT}),),
        _pattern(r"\b(?:in|since|during|until|by)\s+(?P<y>(?:19|20)\d{2})\b"),
        _a_year,
    ),
    (
        (_DAY_WORDS,),
        _pattern(
            r"\b(?:the day before yesterday|the day after tomorrow|yesterday|today|tonight"
            r"|tomorrow|this (?:morning|afternoon|evening)|last night)\b"
        ),
        _days_word,
    ),
    (
        (_WEEKDAY_WORDS,),
        _pattern(r"\b(?P<dir>last|next|this|coming)\s+" + _WEEKDAY + r"\b"),
        _weekday_with,
    ),
    ((_WEEKDAY_WORDS,), _pattern(r"\b(?:on\s+)?" + _WEEKDAY + r"\b"), _weekday),
    (
        (frozenset({"week", "weekend", "month", "year"}),),
        _pattern(r"\b(?P<dir>last|next|this|coming|past)\s+(?P<unit>week|weekend|month|year)\b"),
        _unit_with,
    ),
    ((frozenset({"weekend"}),), _pattern(r"\b(?:over|on|at)\s+the\s+weekend\b"), _the_weekend),
    (
        (frozenset({"ago"}), _UNITS),
        _pattern(r"\b" + _NUMBER + r"\s+" + _UNIT + r"\s+ago\b"),
        _ago,
    ),
    (
        (_UNITS, _NUMERALS),
        _pattern(r"\b(?:in|within)\s+" + _NUMBER + r"\s+" + _UNIT + r"\b(?!\s+ago)"),
        _ahead,
    ),
    (
        (frozenset({"now"}), _UNITS),
        _pattern(r"\b" + _NUMBER + r"\s+" + _UNIT + r"\s+from\s+now\b"),
        _ahead,
    ),
    (
        (frozenset({_DIGIT}),),
        _pattern(
            r"\bon\s+the\s+(?P<d>\d{1,2}(?:st|nd|rd|th))\b(?!\s+(?:of\s+)?(?:"
            + "|".join(_MONTHS)
            + r")\b)"
        ),
        _of_the_month,
    ),
    (
        (frozenset({"month"}),),
        _pattern(
            r"\bthe\s+(?P<d>\d{1,2}(?:st|nd|rd|th)|"
            + "|".join(_ORDINALS)
            + r")\s+of\s+the\s+month\b"
        ),
        _of_the_month,
    ),
]


def matches(text: str, today: datetime.date) -> Iterator[tuple[re.Match[str], Days]]:
    """Every match of every rule in ``text`` and the days it names said on ``today``
    (overlapping ones included); a match naming no day that exists, or out of range,
    is left out."""
    words = set(_LETTERS.findall(text.lower()))
    if _A_DIGIT.search(text):
        words.add(_DIGIT)
    for needs, pattern, rule in _RULES:
        if not all(words & need for need in needs):
            continue
        for match in pattern.finditer(text):
            try:
                days = rule(match, today, text)
            except (ValueError, OverflowError):  # no such day, or out of range
                continue
            if days is not None:
                yield match, days

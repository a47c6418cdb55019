"""Session notes: one note per conversation session, told in a few words (who, what about,
when), beside the notes of its statements.

A statement's note answers "what did Ana say about X?"; a session's answers "what did we
talk about on 26 April?" (:func:`asks_what_was_said`: recall finds session notes by their
time, not their words). :func:`session_notes` makes them from the messages a compaction
compresses and the notes it made of them:

- **Sessions** are runs of messages said at most ``gap`` apart (by
  ``additional_kwargs["timestamp"]``). Messages without a time belong to the run they are
  in; a compaction whose messages have no time at all is one session.
- **What a session note says**: who spoke, the day(s) it was held, then its topics
  ("Ana and Assistant (2024-04-26): Karim, Dublin, travel, trip, flights..."): the names
  its statements' notes mention, then the general concepts they are about, then the
  other words of what the people (not the assistant) said, the most frequent and the
  earliest first in each, the speakers and dates (days, weekdays, months) left out. Its
  ``dates`` are the days its statements name ("yesterday", "on Saturday"). At most
  ``MAX_TOKENS`` tokens (four characters each): a session note stays short whatever
  the length of the session.
- **Provenance**: every message of the session, in order, so it is never mistaken for
  the source of one statement; ``unit`` is ``"session"``.
- **A session cut by a compaction** continues the note of its first part: when the
  compressed messages start at most ``gap`` after the session note the previous
  compaction wrote last ended, that note is told again with the new messages (its message ids and
  topics first, the new ones after), under the same key (a session note's key is its
  first message's), so a session has one note however many compactions it took.
  Telling it again with the same messages changes nothing (a retried step).
"""

from __future__ import annotations

import datetime
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langgraph.store.base import BaseStore

from statekeeper.errors import SerializationError
from statekeeper.memory._concepts import CONCEPTS
from statekeeper.memory._conversation import message_time, speaker
from statekeeper.memory.notes import DateSpan, Note, Provenance, aware
from statekeeper.memory.store.lexical import terms
from statekeeper.memory.store.query import entities

__all__ = [
    "MAX_TOKENS",
    "SESSION_SUMMARIZER",
    "Session",
    "asks_what_was_said",
    "latest_session",
    "session_notes",
    "sessions",
]

MAX_TOKENS = 60  # a session note's text at most, at four characters per token
SESSION_SUMMARIZER = "session/1"  # the provenance's summarizer of session notes
_MAX_TOPICS = 12
_A_DIGIT = re.compile(r"\d")
_CALENDAR = frozenset(
    """monday tuesday wednesday thursday friday saturday sunday january february march april
    may june july august september october november december today tonight tomorrow
    yesterday""".split()  # noqa: SIM905
)
_ABOUT = re.compile(r"\b(?:about|regarding|re)\s+([^\W\d_][\w'’-]*)", re.IGNORECASE)
# what a question asking what was said uses besides its time ("What did we talk about last
# week?", "What happened on 2024-04-26?", "What came up yesterday?")
_TALK = frozenset(
    terms(
        """talk talked talking discuss discussed discussing chat chatted chatting
        conversation conversations happen happened happening say said tell told mention
        mentioned speak spoke cover covered topic topics come came catch caught new news
        anything everything going"""
    )
)


@dataclass(frozen=True)
class Session:
    """Messages said less than the gap apart, in order."""

    messages: tuple[BaseMessage, ...]

    @property
    def times(self) -> list[datetime.datetime]:
        return [aware(t) for t in map(message_time, self.messages) if t is not None]

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(m.id for m in self.messages if m.id)


def sessions(messages: Sequence[BaseMessage], gap: datetime.timedelta) -> list[Session]:
    """``messages`` (system messages left out) cut where two consecutive times are more
    than ``gap`` apart (either way: a time going back starts a session too)."""
    runs: list[list[BaseMessage]] = []
    last: datetime.datetime | None = None
    for message in messages:
        if isinstance(message, SystemMessage):
            continue
        said = message_time(message)
        said = aware(said) if said is not None else None
        if not runs or (said is not None and last is not None and abs(said - last) > gap):
            runs.append([])
        runs[-1].append(message)
        last = said if said is not None else last
    return [Session(tuple(run)) for run in runs]


def asks_what_was_said(question: str, window: str) -> bool:
    """Whether ``question`` asks what was said in the time window it names (the words
    ``window``): besides them it says nothing but words about talking and the names of
    who talked ("What did Ana and I discuss last week?"; a name after "about" is what
    was talked about). Such a question is what a session note answers."""
    rest = question.replace(window, " ")
    topics = {m[1].casefold() for m in _ABOUT.finditer(rest)}  # "about Karim": a topic
    named = {
        term for name in entities(rest) if name.casefold() not in topics for term in terms(name)
    }
    return not (set(terms(rest)) - _TALK - named)


def session_notes(
    messages: Sequence[BaseMessage],
    notes: Sequence[Note],
    *,
    gap: datetime.timedelta,
    base: Provenance,
    latest: Note | None = None,
) -> list[Note]:
    """The session notes of ``messages`` (what a compaction compresses), told from
    ``notes`` (the notes it made of them), the first continuing ``latest`` (the session
    note the previous compaction wrote last, :func:`latest_session`) when its session
    goes on (see the module docstring). ``base`` gives the thread, checkpoint and time of
    the compaction. A session whose messages made no note (only chit-chat) has none."""
    found: list[Note] = []
    runs = [run for run in sessions(messages, gap) if run.ids]
    for index, run in enumerate(runs):
        ids = set(run.ids)
        own = [note for note in notes if ids.intersection(note.provenance.message_ids)]
        if not own:
            continue
        earlier = _continued(latest, run, gap) if index == 0 else None
        found.append(_told(run, own, earlier, base))
    return found


def _told(run: Session, notes: Sequence[Note], earlier: Note | None, base: Provenance) -> Note:
    ids = tuple(dict.fromkeys((*(earlier.provenance.message_ids if earlier else ()), *run.ids)))
    times = run.times
    said_from = earlier.provenance.said_from if earlier else (times[0] if times else None)
    said_to = times[-1] if times else (earlier.provenance.said_to if earlier else None)
    who = list(dict.fromkeys((*_speakers(earlier), *(speaker(m) for m in run.messages))))
    dates = tuple(dict.fromkeys((*(earlier.dates if earlier else ()), *_dates(notes))))
    skip = {name.casefold() for name in who}
    people = {speaker(m) for m in run.messages if isinstance(m, HumanMessage)}
    topics = _topics(notes, skip, earlier.topics if earlier else (), people)
    days = _days(said_from, said_to)
    text = _text(who, days, topics)
    return Note(
        text=text,
        provenance=base.model_copy(
            update={
                "message_ids": ids,
                "said_from": said_from,
                "said_to": said_to,
                "summarizer": SESSION_SUMMARIZER,
            }
        ),
        topics=(*topics, *days, *_months(said_from, said_to)),
        unit="session",
        dates=dates,
    )


def _speakers(note: Note | None) -> list[str]:
    # who spoke opens the text: "Ana and Assistant (2024-04-26): ..."
    if note is None:
        return []
    people = note.text.split("): ", 1)[0].rsplit(" (", 1)[0]
    return [name for name in people.replace(" and ", ", ").split(", ") if name]


def _dates(notes: Sequence[Note]) -> Iterator[DateSpan]:
    for note in notes:
        yield from note.dates


def _topics(
    notes: Sequence[Note], skip: set[str], first: Sequence[str], people: set[str]
) -> list[str]:
    """What ``notes`` are about, ``first`` (an earlier part's) before the rest: the names
    they mention, then the general concepts (:data:`~statekeeper.memory._concepts.CONCEPTS`),
    then the other words of what ``people`` (the human speakers) said; within each, the
    most often named first, then the earliest. Dates and ``skip`` (the speakers) are left
    out: a session's days are in its text already."""
    counts: Counter[str] = Counter()
    order: dict[str, int] = {}
    shown: dict[str, str] = {}
    for note in notes:
        theirs = note.text.split(":", 1)[0] in people
        for topic in note.topics:
            key = topic.casefold()
            if key in skip or key in _CALENDAR or _A_DIGIT.search(topic):
                continue
            if not (topic[:1].isupper() or key in CONCEPTS or theirs):
                continue
            counts[key] += 1
            order.setdefault(key, len(order))
            shown.setdefault(key, topic)

    def tier(key: str) -> int:
        return 0 if shown[key][:1].isupper() else 1 if key in CONCEPTS else 2

    ranked = sorted(counts, key=lambda key: (tier(key), -counts[key], order[key]))
    kept = [topic for topic in first if not _A_DIGIT.search(topic)]
    known = {topic.casefold() for topic in kept}
    kept += [shown[key] for key in ranked if key not in known]
    return kept[:_MAX_TOPICS]


def _days(said_from: datetime.datetime | None, said_to: datetime.datetime | None) -> list[str]:
    days = [t.date().isoformat() for t in (said_from, said_to) if t is not None]
    return list(dict.fromkeys(days))


def _months(said_from: datetime.datetime | None, said_to: datetime.datetime | None) -> list[str]:
    months = [f"{t:%B} {t.year}" for t in (said_from, said_to) if t is not None]
    return list(dict.fromkeys(months))


def _text(who: Sequence[str], days: Sequence[str], topics: Sequence[str]) -> str:
    people = " and ".join(who) if len(who) <= 2 else f"{', '.join(who[:-1])} and {who[-1]}"
    when = f" ({' to '.join(days)})" if days else " (undated)"
    head = f"{people}{when}: "
    budget = MAX_TOKENS * 4 - len(head) - 1
    said: list[str] = []
    for topic in topics:
        if len(", ".join((*said, topic))) > budget:
            break
        said.append(topic)
    return f"{head}{', '.join(said)}." if said else f"{head}a conversation."


def latest_session(store: BaseStore, namespace: tuple[str, ...], key: str | None) -> Note | None:
    """The session note stored under ``key`` in ``namespace`` (the last note a compaction
    wrote), or ``None`` when there is none or it is not a session note: one read, whatever
    the number of notes stored."""
    item = store.get(namespace, key) if key is not None else None
    if item is None:
        return None
    try:
        note = Note.from_value(item.value)
    except SerializationError:
        return None
    return note if note.unit == "session" else None


def _continued(latest: Note | None, run: Session, gap: datetime.timedelta) -> Note | None:
    """``latest`` if ``run`` continues its session: its first time is at most ``gap`` from
    the note's last."""
    times = run.times
    said_to = latest.provenance.said_to if latest is not None else None
    if not times or said_to is None:
        return None
    return latest if abs(times[0] - aware(said_to)) <= gap else None

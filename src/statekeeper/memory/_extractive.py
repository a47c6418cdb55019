"""The text engine of the extractive summarizer: statements, topics, dates and the digest.

Everything here is deterministic: the same messages always give the same statements in the
same order, with no model, no network and no randomness.
"""

from __future__ import annotations

import datetime
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage

from statekeeper.memory._concepts import concept_tags, fact_key, fact_topics
from statekeeper.memory._conversation import message_text, message_time, speaker
from statekeeper.memory._units.temporal import TimeSpan, annotate

__all__ = ["Statement", "digest", "estimate_tokens", "extract_statements"]


def _wordset(words: str) -> frozenset[str]:
    return frozenset(words.split())


_STOPWORDS = _wordset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
    i'm i've i'd i'll you're you've it's that's there's what's let's don't didn't doesn't isn't
    aren't wasn't weren't can't couldn't won't wouldn't shouldn't also really much many maybe
    still even well get got go going gonna wanna like one thing things something anything lot
    s t d ll m re ve"""
)
# chit-chat: a sentence made only of these (and stopwords) carries nothing worth recalling
_FILLERS = _wordset(
    """ok okay k kk yes yeah yep yup no nope nah sure thanks thank thx ty please welcome
    great cool nice good fine awesome amazing perfect wonderful excellent lovely fun glad
    haha hahaha lol lmao hehe hmm hm um uh oh ah wow whoa hi hello hey bye goodbye cya
    right alright exactly totally absolutely definitely indeed true agreed sounds see know
    mean guess think say said tell told hear heard happy sorry congrats congratulations
    cheers"""
)
# What greetings, farewells and small acknowledgements are made of: a sentence of only
# these, fillers and the speakers' names ("Morning! Got a minute?", "Take care, Ana!",
# "Welcome back.") opens or closes a conversation and says nothing about anyone's life.
_PHATIC = _wordset(
    """morning afternoon evening night tonight day week weekend again back soon later
    talk talking chat chatting speak speaking catch minute minutes sec second moment quick
    free time bye goodbye farewell care welcome meet nice see seeing hear hearing listening
    run gotta off done ready rest enjoy luck wish wishes well new up long busy anytime
    always course pleasure take need mind"""
)
# a sentence starting with one of these leans on the one before it
_LEANING = _wordset(
    """it its it's this that these those they them their he she his her which also but and so
    because then there she's he's they're"""
)
# relative time words: resolved into dates, never topics themselves
_TEMPORAL = _wordset(
    """today tonight yesterday tomorrow morning afternoon evening last next ago week weekend
    month year day days weeks months years"""
)
_ABBREVIATIONS = _wordset("mr mrs ms dr st jr sr vs etc e.g i.e prof inc approx a.m p.m")

_WORD = re.compile(r"\w[\w'’-]*")
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")
_SENTENCE_END = re.compile(r"(?<=[.!?…])[\"'”’)\]]*\s+")
_MAX_WORDS = 80  # longer statements are cut into pieces of this many words
_WHOLE_TOKENS = 60  # a one-line message this short is one statement: its sentences are one fact
_MAX_TOPICS = 10  # besides the two that date the statement
_MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August",
    "September", "October", "November", "December",
)  # fmt: skip


@dataclass(frozen=True)
class Statement:
    """One retrieval unit: ``text`` (speaker included) and where it came from."""

    text: str
    message_ids: tuple[str, ...]
    topics: tuple[str, ...]
    said_on: datetime.date | None
    words: tuple[str, ...]  # its content words, lower-cased, for scoring
    fact: tuple[str, str] | None = None  # (subject, attribute) of the fact it asserts
    dates: tuple[TimeSpan, ...] = ()  # the time expressions it names, resolved


def estimate_tokens(text: str) -> int:
    """Tokens in ``text`` at four characters per token (``count_tokens_approximately``'s rate)."""
    return math.ceil(len(text) / 4)


def content_words(text: str) -> list[str]:
    """The words of ``text`` that are neither stopwords nor chit-chat, lower-cased."""
    words = (w.lower().replace("’", "'") for w in _WORD.findall(text))
    return [
        w.removesuffix("'s")
        for w in words
        if w not in _STOPWORDS and w not in _FILLERS and (len(w) > 1 or w.isdigit())
    ]


def split_sentences(text: str) -> list[str]:
    """``text`` split into sentences: at line breaks, list bullets, and ``.!?`` followed by
    a space (not after a known abbreviation or an initial)."""
    sentences: list[str] = []
    for line in text.splitlines():
        line = _BULLET.sub("", line).strip()
        if not line:
            continue
        pending = ""
        for piece in _SENTENCE_END.split(line):
            pending = f"{pending} {piece}" if pending else piece
            last = pending.rsplit(maxsplit=1)[-1].rstrip(".").lower() if pending else ""
            if last in _ABBREVIATIONS or (len(last) == 1 and last.isalpha()):
                continue
            sentences.append(pending)
            pending = ""
        if pending:
            sentences.append(pending)
    return sentences


def extract_statements(messages: Sequence[BaseMessage]) -> list[Statement]:
    """The salient statements of ``messages``, in conversation order.

    Each human, AI or tool message is split into sentences; sentences with no content word
    ("ok", "thanks!", "haha") and greetings, farewells and acknowledgements ("Morning! Got
    a minute?", "Take care, Ana!") are dropped. What is left of a message written on one
    line and at most ``_WHOLE_TOKENS`` long is one statement, since its sentences tell one
    thing ("I handed in my notice at X. In three weeks I'm joining Y."); a longer message
    is cut at its sentences, a sentence that leans on the one before it (starts with "it",
    "but", "they"...) or has a single content word staying with it. Relative dates are
    resolved against the message's timestamp; the text is prefixed with the speaker ("Ana:
    I adopted a cat named Miso."). A short reply to a question from another speaker keeps
    the question with it, so "Miso!" is recalled together with "What is your cat called?".
    A human's statement of a single-valued fact about themselves gets its ``(subject,
    attribute)`` key (:func:`~statekeeper.memory._concepts.fact_key`). System messages
    and the tool calls of AI messages make no statement.
    """
    document_frequency = Counter(
        word
        for m in messages
        if not isinstance(m, SystemMessage)
        for word in set(content_words(message_text(m)))
    )
    names = _names(messages)
    speakers = {word.lower() for m in messages for word in _WORD.findall(speaker(m))}
    statements: list[Statement] = []
    for index, message in enumerate(messages):
        if isinstance(message, SystemMessage):
            continue
        said_at = message_time(message)
        label = speaker(message)
        if isinstance(message, ToolMessage):
            label = f"{label} (tool result)"
        text = message_text(message)
        sentences = [s for s in split_sentences(text) if not _is_chit_chat(s, speakers)]
        if not sentences:
            continue
        one_line = "\n" not in text and estimate_tokens(text) <= _WHOLE_TOKENS
        groups = [sentences] if one_line else _group_sentences(sentences)
        ids: tuple[str, ...] = (message.id,) if message.id else ()
        context = ""
        if len(groups) == 1 and len(content_words(" ".join(groups[0]))) < 3:
            context, ids = _question_before(messages, index, ids)
        for group in groups:
            body = " ".join(group)
            for piece in _pieces(body):
                spans: list[TimeSpan] = []
                if said_at is not None:
                    piece, spans = annotate(piece, said_at)
                words = tuple(content_words(piece))
                topics = _topics(piece, words, document_frequency, names)
                said_on = said_at.date() if said_at else None
                if said_on is not None:
                    topics = (*topics, said_on.isoformat(), _month(said_on))
                topics = tuple(dict.fromkeys((*topics, *_date_topics(spans))))
                # only what people say of themselves is theirs to update
                fact = fact_key(piece, label) if message.type == "human" else None
                if fact is not None:
                    topics = tuple(dict.fromkeys((*topics, *fact_topics(fact[1]))))
                text = f"{context}{label}: {piece}"
                statements.append(Statement(text, ids, topics, said_on, words, fact, tuple(spans)))
    return statements


def _is_chit_chat(sentence: str, speakers: set[str]) -> bool:
    """Whether ``sentence`` has no content word besides greetings, farewells,
    acknowledgements and the names of who is talking."""
    return all(word in _PHATIC or word in speakers for word in content_words(sentence))


def _month(day: datetime.date) -> str:
    return f"{_MONTHS[day.month - 1]} {day.year}"


def _date_topics(spans: Sequence[TimeSpan]) -> list[str]:
    """The days and months the relative dates of a statement name, as the topics of the
    day it was said are written ("2024-05-07", "May 2024"): a question naming one finds
    the statement even when it was said on another day."""
    topics: list[str] = []
    for span in spans:
        if not span.relative:
            continue
        if (span.end - span.start).days == 1:
            topics.append(span.start.isoformat())
        topics.extend(_month(first) for first in span.months[:2])
    return topics


def _names(messages: Sequence[BaseMessage]) -> set[str]:
    """Capitalised words seen somewhere other than at the start of a sentence: names,
    places, brands (a sentence-initial "Went" is not one; "Lisbon" is, wherever it is)."""
    names: set[str] = set()
    for message in messages:
        for sentence in split_sentences(message_text(message)):
            for word in _WORD.findall(sentence)[1:]:
                bare = word.removesuffix("'s").removesuffix("’s")
                if bare[0].isupper() and len(bare) > 2 and bare.lower() not in _STOPWORDS:
                    names.add(bare)
    return names


def _group_sentences(sentences: list[str]) -> list[list[str]]:
    groups: list[list[str]] = []
    for sentence in sentences:
        words = content_words(sentence)
        first = sentence.split(maxsplit=1)[0].lower().strip("\"'“(,")
        if groups and (len(words) < 2 or first in _LEANING):
            groups[-1].append(sentence)
        else:
            groups.append([sentence])
    return groups


def _question_before(
    messages: Sequence[BaseMessage], index: int, ids: tuple[str, ...]
) -> tuple[str, tuple[str, ...]]:
    """The question a short reply at ``index`` answers, as a prefix, and the ids with it."""
    if index == 0 or isinstance(messages[index], ToolMessage):
        return "", ids
    before = messages[index - 1]
    question = message_text(before)
    if (
        isinstance(before, SystemMessage | ToolMessage)
        or (isinstance(before, AIMessage) and before.tool_calls)
        or speaker(before) == speaker(messages[index])
        or not question.endswith("?")
    ):
        return "", ids
    asked = split_sentences(question)[-1]
    prior: tuple[str, ...] = (before.id,) if before.id else ()
    return f"{speaker(before)} asked: {asked} ", (*prior, *ids)


def _pieces(text: str) -> list[str]:
    words = text.split()
    return [" ".join(words[i : i + _MAX_WORDS]) for i in range(0, len(words), _MAX_WORDS)]


def _topics(
    text: str, words: Sequence[str], frequency: Counter[str], names: set[str]
) -> tuple[str, ...]:
    """Names, numbers and dates, the tags of the concepts it mentions (``_concepts``),
    then the statement's rarest words; at most ten."""
    found: dict[str, str] = {}  # lower-cased -> as shown
    for word in _WORD.findall(text):
        bare = word.removesuffix("'s").removesuffix("’s")
        lower = bare.lower()
        if lower in _STOPWORDS or lower in _FILLERS or lower in _TEMPORAL:
            continue
        if bare in names or any(ch.isdigit() for ch in bare):
            found.setdefault(lower, bare)
    for tag in concept_tags(words):
        found.setdefault(tag, tag)
    rare = sorted(
        (w for w in set(words) if len(w) >= 5 and w not in found and w not in _TEMPORAL),
        key=lambda w: (frequency[w], -len(w), w),
    )
    for word in rare:
        found.setdefault(word, word)
    return tuple(found.values())[:_MAX_TOPICS]


def digest(
    statements: Sequence[Statement],
    previous: str | None,
    *,
    size: int,
    max_tokens: int,
) -> str:
    """The running summary: the previous summary's lines, then the ``size`` most salient
    new statements in conversation order, one per line ("- 2024-05-08 Ana: ..."); the
    oldest lines are dropped until the text fits in ``max_tokens``.

    Salience is the sum of the statement's distinct content words' inverse frequency
    across ``statements``, favouring statements with distinctive, specific words over
    those repeating what was said often.
    """
    frequency = Counter(word for s in statements for word in set(s.words))
    total = len(statements)

    def salience(statement: Statement) -> float:
        distinct = set(statement.words)
        # fsum: exactly rounded whatever the order, so a set of words (ordered by the
        # hash seed) gives the same score, and ties break the same way, in every process
        score = math.fsum(math.log((total + 1) / (frequency[w] + 0.5)) for w in distinct)
        return score / math.sqrt(len(statement.words) + 1) * math.log(len(distinct) + 1)

    ranked = sorted(range(total), key=lambda i: (-salience(statements[i]), i))[:size]
    lines = [line for line in (previous or "").splitlines() if line.strip()]
    said = {line.partition(" ")[2] for line in lines}  # repeated statements are told once
    for i in sorted(ranked):
        statement = statements[i]
        when = f"{statement.said_on.isoformat()} " if statement.said_on else ""
        line = f"- {when}{statement.text}"
        if statement.text not in said and line.partition(" ")[2] not in said:
            said.add(statement.text)
            lines.append(line)
    while lines and estimate_tokens("\n".join(lines)) > max_tokens:
        if len(lines) == 1:
            lines[0] = lines[0][: max_tokens * 4 - 1].rstrip() + "…"
            break
        lines.pop(0)
    return "\n".join(lines)


def resolve_dates(text: str, on: datetime.date) -> str:
    """``text`` with relative dates said on ``on`` followed by what they mean:
    "yesterday" -> "yesterday (2024-05-07)", "last week" -> "last week (week of 2024-04-29)",
    "two months ago" -> "two months ago (March 2024)" (the rules:
    :mod:`statekeeper.memory._units.temporal`)."""
    return annotate(text, on)[0]

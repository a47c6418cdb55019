"""Summarizers: turn the oldest messages of a conversation into a running summary and notes.

A :class:`Summarizer` has a ``name`` (with a version: ``"extractive/4"``) and one method,
``summarize(messages, previous_summary) -> Summary``. Two ship with statekeeper:

- :class:`ExtractiveSummarizer`, the default: deterministic and offline (no model, no
  network); its notes are the conversation's salient statements, verbatim.
- :class:`ChatModelSummarizer`: asks any LangChain chat model for the summary and the notes.

:class:`~statekeeper.memory.node.SummarizationNode` adds provenance (thread, checkpoint,
times, summarizer) to each :class:`NoteDraft` to make a :class:`~statekeeper.memory.notes.Note`.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, Field, ValidationError

from statekeeper.errors import SummarizerOutputError
from statekeeper.memory._conversation import message_text, message_time, speaker
from statekeeper.memory._extractive import digest, extract_statements
from statekeeper.memory.notes import DateSpan, normalize_label

__all__ = [
    "ChatModelSummarizer",
    "ExtractiveSummarizer",
    "NoteDraft",
    "Summarizer",
    "SummarizerOutputError",
    "Summary",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class NoteDraft:
    """A note before provenance: its text, the ids of the messages it came from (in
    conversation order), the words or phrases it is about, the ``(subject, attribute)``
    key of the single-valued fact it states (``None``: none), by which contradicting
    notes are found (:mod:`statekeeper.memory.conflicts`), and the dates its words name,
    resolved (:class:`~statekeeper.memory.notes.DateSpan`)."""

    text: str
    message_ids: tuple[str, ...]
    topics: tuple[str, ...] = ()
    fact: tuple[str, str] | None = None
    dates: tuple[DateSpan, ...] = ()


@dataclass(frozen=True)
class Summary:
    """What a summarizer returns: the new running summary (which replaces the previous
    one, so it must carry forward whatever of it still matters) and notes.

    ``summarizer`` names who actually made it when that is not the summarizer called
    (a :class:`ChatModelSummarizer` that fell back to its fallback); ``None`` otherwise.
    """

    text: str
    notes: tuple[NoteDraft, ...] = ()
    summarizer: str | None = None


@runtime_checkable
class Summarizer(Protocol):
    """Summarizes the oldest part of a conversation.

    ``name`` identifies the algorithm and its version (``"extractive/4"``); it is written
    into every note's provenance, so change the version whenever the output changes.

    ``summarize`` is never called with an empty ``messages`` (``SummarizationNode``
    guarantees it). ``previous_summary`` is the running summary so far, ``None`` before
    the first compaction. Note ``message_ids`` must be ids of ``messages``.
    """

    @property
    def name(self) -> str: ...

    def summarize(
        self, messages: Sequence[BaseMessage], previous_summary: str | None
    ) -> Summary: ...


class ExtractiveSummarizer:
    """The default summarizer: deterministic, offline, no model.

    Notes are retrieval units: one per salient statement. Greetings, farewells and
    chit-chat ("Morning! Got a minute?", "ok", "thanks!") are dropped; a short one-line
    message is one note, whatever its number of sentences, since they tell one fact; a
    longer message is cut at its sentences, a sentence that leans on the previous one
    ("It is called Miso.") staying with it; the speaker is kept in the text ("Ana: I
    adopted a cat named Miso."); relative dates are resolved against the message's
    timestamp ("yesterday (2024-05-07)"); a short reply keeps the question it answers. A
    note's ``message_ids`` are the message(s) it came from; its ``topics`` are the names,
    numbers and dates it contains, the general concepts it is about ("vehicle" for a
    hatchback, "food" for an allergy: a small fixed lexicon of common words, so a
    question's words can find a note that never says them), its rarest words, and the day
    and month it was said ("2024-05-08", "May 2024"). A person's statement of where they
    live, who they work for, what they do, drive or eat, or what they are allergic to
    (themselves or a close relative: "my sister lives in...") gets the fact's key:
    ``("ana", "home")``. System messages and tool-call requests make no note; a message
    that makes no note on its own makes none in a batch either.

    The running summary is the previous summary's lines followed by the ``digest_size``
    most salient new statements (distinctive words count most), one per line, the oldest
    lines dropped to stay within ``max_summary_tokens`` (at four characters per token).
    """

    name = "extractive/4"

    def __init__(self, *, digest_size: int = 6, max_summary_tokens: int = 400) -> None:
        if digest_size < 0 or max_summary_tokens < 1:
            raise ValueError("digest_size must be >= 0 and max_summary_tokens >= 1")
        self.digest_size = digest_size
        self.max_summary_tokens = max_summary_tokens

    def summarize(self, messages: Sequence[BaseMessage], previous_summary: str | None) -> Summary:
        statements = extract_statements(messages)
        text = digest(
            statements,
            previous_summary,
            size=self.digest_size,
            max_tokens=self.max_summary_tokens,
        )
        notes = tuple(
            NoteDraft(
                s.text,
                s.message_ids,
                s.topics,
                s.fact,
                tuple(DateSpan(phrase=d.phrase, start=d.start, end=d.end) for d in s.dates),
            )
            for s in statements
        )
        return Summary(text, notes)

    def __repr__(self) -> str:
        return (
            f"ExtractiveSummarizer(digest_size={self.digest_size}, "
            f"max_summary_tokens={self.max_summary_tokens})"
        )


DEFAULT_PROMPT = """\
You maintain the memory of a long conversation. You are given the current running summary \
and the oldest messages, which are about to be removed from the conversation. Each message \
is numbered [n].

Answer with one JSON object and nothing else:
{"summary": "<the updated running summary: the current summary merged with what matters in \
the messages; at most 200 words>",
 "notes": [{"text": "<one self-contained fact, decision, preference or event, naming who \
said it and resolving relative dates>", "sources": [<numbers of the messages it comes \
from>], "topics": ["<names, places, things it is about>"]}]}

Write one note per fact worth recalling later; skip greetings and chit-chat. When a note \
states the current value of a single-valued fact about someone (where they live, who they \
work for, what they drive...), add "subject": "<who>" and "attribute": "<what>" to it, \
worded the same way every time ("subject": "Ana", "attribute": "home"), so that a later \
note with the same subject and attribute is known to update it."""


_EXTRACTIVE = ExtractiveSummarizer()


class _ModelNote(BaseModel):
    text: str
    sources: list[int | str] = Field(default_factory=list)
    topics: list[str] = Field(default_factory=list)
    subject: str | None = None
    attribute: str | None = None


class _ModelAnswer(BaseModel):
    summary: str
    notes: list[_ModelNote] = Field(default_factory=list)


_FENCE = re.compile(r"^\s*```(?:json)?\s*|\s*```\s*$")


class ChatModelSummarizer:
    """A summarizer over any LangChain chat model.

    The model gets ``prompt`` as a system message, then the previous summary and the
    messages, numbered ``[1]``, ``[2]``... (numbers cost fewer tokens than ids and models
    copy them reliably). It must answer with JSON: ``{"summary": str, "notes": [{"text":
    str, "sources": [int], "topics": [str]}]}`` (a fenced code block is accepted); a note
    may add ``"subject"`` and ``"attribute"``, the key of the fact it states (normalised;
    ignored unless both are non-blank text).

    Sources are validated against the input: unknown numbers are dropped, message ids are
    accepted as well, and a note left with no valid source gets every input message's id.
    Notes with empty text are dropped.

    When the answer is not that JSON, the batch is summarized by ``fallback`` (the
    :class:`ExtractiveSummarizer` by default) and a warning is logged; the returned
    :class:`Summary` names the fallback, so the notes' provenance says who really made
    them. With ``fallback=None``, :class:`SummarizerOutputError` is raised instead. Errors
    of the model call itself propagate unchanged.
    """

    def __init__(
        self,
        model: BaseChatModel,
        *,
        prompt: str = DEFAULT_PROMPT,
        fallback: Summarizer | None = _EXTRACTIVE,
        name: str | None = None,
    ) -> None:
        self.model = model
        self.prompt = prompt
        self.fallback = fallback
        model_name = getattr(model, "model_name", None) or getattr(model, "model", None)
        self._name = name or f"chat/2:{model_name or type(model).__name__}"

    @property
    def name(self) -> str:
        """``"chat/2:<model name>"`` unless given."""
        return self._name

    def summarize(self, messages: Sequence[BaseMessage], previous_summary: str | None) -> Summary:
        request = [
            SystemMessage(self.prompt),
            HumanMessage(_render(messages, previous_summary)),
        ]
        reply = self.model.invoke(request)
        try:
            answer = _parse(reply.text)
        except SummarizerOutputError as exc:
            if self.fallback is None:
                raise
            logger.warning("%s; summarizing with %s instead", exc, self.fallback.name)
            summary = self.fallback.summarize(messages, previous_summary)
            return Summary(summary.text, summary.notes, summary.summarizer or self.fallback.name)
        return Summary(answer.summary.strip(), _drafts(answer.notes, messages))

    def __repr__(self) -> str:
        return f"ChatModelSummarizer({self.model!r}, name={self._name!r})"


def _render(messages: Sequence[BaseMessage], previous_summary: str | None) -> str:
    lines = [f"Current summary:\n{previous_summary or '(none yet)'}", "", "Messages:"]
    for number, message in enumerate(messages, start=1):
        said = message_time(message)
        when = f" {said.isoformat()}" if said else ""
        text = message_text(message)
        if isinstance(message, AIMessage):
            calls = ", ".join(
                f"{c['name']}({json.dumps(c['args'], sort_keys=True)})" for c in message.tool_calls
            )
            text = f"{text} [calls {calls}]".strip() if calls else text
        lines.append(f"[{number}]{when} {speaker(message)} ({message.type}): {text}")
    return "\n".join(lines)


def _parse(content: str) -> _ModelAnswer:
    body = _FENCE.sub("", content)
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end < start:
        raise SummarizerOutputError(f"the model's answer has no JSON object: {content[:80]!r}")
    try:
        return _ModelAnswer.model_validate(json.loads(body[start : end + 1]))
    except (json.JSONDecodeError, ValidationError) as exc:
        raise SummarizerOutputError(f"the model's answer is not the JSON asked for: {exc}") from exc


def _drafts(notes: Sequence[_ModelNote], messages: Sequence[BaseMessage]) -> tuple[NoteDraft, ...]:
    ids = [m.id for m in messages if m.id]
    by_number = {str(n): m.id for n, m in enumerate(messages, start=1) if m.id}
    drafts = []
    for note in notes:
        text = note.text.strip()
        if not text:
            continue
        wanted = {by_number.get(str(s)) or (s if s in ids else None) for s in note.sources}
        sources = tuple(i for i in ids if i in wanted) or tuple(ids)
        topics = tuple(dict.fromkeys(t.strip() for t in note.topics if t.strip()))
        drafts.append(NoteDraft(text, sources, topics, _fact(note.subject, note.attribute)))
    return tuple(drafts)


def _fact(subject: str | None, attribute: str | None) -> tuple[str, str] | None:
    subject, attribute = normalize_label(subject or ""), normalize_label(attribute or "")
    return (subject, attribute) if subject and attribute else None

"""The evaluation dataset: its pydantic models and :func:`load_dataset`, which checks it.

A dataset is conversations (sessions of messages, each session with the time it took
place) and questions about them, each naming the messages that hold its answer.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from statekeeper.errors import ConfigurationError, SerializationError

__all__ = ["Conversation", "Dataset", "Message", "Question", "Session", "load_dataset"]

NO_ANSWER = "no-answer"  # the category of questions the conversation does not answer

_STRICT = ConfigDict(frozen=True, extra="forbid")


class Message(BaseModel):
    """One message: ``id`` is unique in its conversation; ``speaker`` is who said it."""

    model_config = _STRICT

    id: str = Field(min_length=1)
    speaker: str = Field(min_length=1)
    role: Literal["user", "assistant"]
    text: str = Field(min_length=1)


class Session(BaseModel):
    """Messages exchanged in one sitting, in order, at ``time``."""

    model_config = _STRICT

    id: str = Field(min_length=1)
    time: datetime.datetime
    messages: tuple[Message, ...] = Field(min_length=1)


class Conversation(BaseModel):
    """Sessions of one conversation, in chronological order."""

    model_config = _STRICT

    id: str = Field(min_length=1)
    sessions: tuple[Session, ...] = Field(min_length=1)

    def messages(self) -> Iterable[tuple[Session, Message]]:
        """Every message with its session, in conversation order."""
        for session in self.sessions:
            for message in session.messages:
                yield session, message


class Question(BaseModel):
    """A question about one conversation. ``evidence`` lists the ids of the messages
    that hold the answer; it is empty for questions the conversation does not answer.
    ``answer`` is the gold answer, which the answer evaluation scores (``None``: the
    question has none; the retrieval evaluation scores ``evidence`` only)."""

    model_config = _STRICT

    id: str = Field(min_length=1)
    conversation: str
    question: str = Field(min_length=1)
    evidence: tuple[str, ...]
    category: str = Field(min_length=1)
    answer: str | None = None


class Dataset(BaseModel):
    """Conversations and the questions asked about them."""

    model_config = _STRICT

    conversations: tuple[Conversation, ...] = Field(min_length=1)
    questions: tuple[Question, ...] = Field(min_length=1)


def load_dataset(path: str | Path) -> Dataset:
    """Read and check the dataset at ``path``.

    Beyond the format, every id is unique where it must be (conversations, questions, and
    sessions and messages within a conversation), each question names a known
    conversation and only evidence from it, only ``no-answer`` questions have no
    evidence, and a conversation's sessions are in chronological order.

    Raises:
        ConfigurationError: ``path`` cannot be read.
        SerializationError: the file is not such a dataset; the message names the JSON
            path of the first problem (``questions[3].evidence[0]``).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"cannot read dataset {str(path)!r}: {exc}") from exc
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SerializationError(f"dataset {str(path)!r} is not JSON: {exc}") from exc
    except RecursionError:  # json's decoder recurses once per nested array or object
        raise SerializationError(
            f"dataset {str(path)!r} nests arrays or objects too deeply to be a dataset"
        ) from None
    return parse_dataset(data, source=str(path))


def parse_dataset(data: Any, *, source: str = "dataset") -> Dataset:
    """Check already-decoded JSON ``data`` as :func:`load_dataset` does."""
    try:
        dataset = Dataset.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = _json_path(first["loc"])
        raise SerializationError(f"{source}: {where}: {first['msg']}") from exc
    problem = _first_problem(dataset)
    if problem is not None:
        raise SerializationError(f"{source}: {problem}")
    return dataset


def _json_path(loc: Iterable[int | str]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path or "(top level)"


def _first_problem(dataset: Dataset) -> str | None:
    """The first inconsistency the models cannot see, as "path: what is wrong"."""
    message_ids: dict[str, set[str]] = {}
    seen_conversations: set[str] = set()
    for c, conversation in enumerate(dataset.conversations):
        where = f"conversations[{c}]"
        if conversation.id in seen_conversations:
            return f"{where}.id: duplicate conversation id {conversation.id!r}"
        seen_conversations.add(conversation.id)
        problem = _conversation_problem(conversation, where)
        if problem is not None:
            return problem
        message_ids[conversation.id] = {m.id for _, m in conversation.messages()}
    seen_questions: set[str] = set()
    for q, question in enumerate(dataset.questions):
        where = f"questions[{q}]"
        if question.id in seen_questions:
            return f"{where}.id: duplicate question id {question.id!r}"
        seen_questions.add(question.id)
        known = message_ids.get(question.conversation)
        if known is None:
            return f"{where}.conversation: unknown conversation {question.conversation!r}"
        for e, evidence in enumerate(question.evidence):
            if evidence not in known:
                return (
                    f"{where}.evidence[{e}]: message {evidence!r} is not in conversation "
                    f"{question.conversation!r}"
                )
        if not question.evidence and question.category != NO_ANSWER:
            return f"{where}.evidence: empty, but only {NO_ANSWER!r} questions have no evidence"
        if question.evidence and question.category == NO_ANSWER:
            return f"{where}.evidence: {NO_ANSWER!r} questions must have no evidence"
    return None


def _conversation_problem(conversation: Conversation, where: str) -> str | None:
    sessions: set[str] = set()
    messages: set[str] = set()
    previous: datetime.datetime | None = None
    for s, session in enumerate(conversation.sessions):
        here = f"{where}.sessions[{s}]"
        if session.id in sessions:
            return f"{here}.id: duplicate session id {session.id!r}"
        sessions.add(session.id)
        # naive and aware times cannot be ordered
        if (session.time.tzinfo is None) != (conversation.sessions[0].time.tzinfo is None):
            return f"{here}.time: mixes times with and without a UTC offset"
        if previous is not None and session.time < previous:
            return f"{here}.time: {session.time.isoformat()} is before the previous session"
        previous = session.time
        for m, message in enumerate(session.messages):
            if message.id in messages:
                return f"{here}.messages[{m}].id: duplicate message id {message.id!r}"
            messages.add(message.id)
    return None

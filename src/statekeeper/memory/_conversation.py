"""Message-window helpers: who said a message, when, and where a history may be cut;
and the checks of the messages and summary a node reads from the state.

The cut rules are the conversation invariants :class:`~statekeeper.memory.node.SummarizationNode`
promises; keeping them in pure functions over a list of messages lets the property tests
state them directly.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from statekeeper.errors import ConfigurationError

__all__ = [
    "TIMESTAMP_KEY",
    "Cut",
    "checked_messages",
    "checked_summary",
    "choose_cut",
    "message_text",
    "message_time",
    "speaker",
    "tool_call_ids",
]

TIMESTAMP_KEY = "timestamp"  # additional_kwargs key holding when a message was said (ISO 8601)

TokenCounter = Callable[[Sequence[BaseMessage]], int]


def checked_messages(value: object, where: str) -> list[BaseMessage]:
    """``value`` (the state's ``where``) as a list of messages, or a one-line
    :class:`ConfigurationError` saying what it is instead; ``None`` is no messages."""
    if value is None:
        return []
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise ConfigurationError(
            f"{where} must be a list of messages, got {type(value).__name__} {_shown(value)}"
        )
    for index, item in enumerate(value):
        if not isinstance(item, BaseMessage):
            raise ConfigurationError(
                f"{where}[{index}] must be a message (a langchain BaseMessage), got "
                f"{type(item).__name__} {_shown(item)}"
            )
    return list(value)


def checked_summary(value: Any, where: str, schema: Any) -> Any:
    """``value`` (the state's ``where``) as a running summary, ``None`` before the first
    one; a one-line :class:`ConfigurationError` when it is not a mapping with the keys of
    ``schema`` (a ``TypedDict``)."""
    if not value:
        return None
    missing = sorted(schema.__required_keys__ - value.keys()) if isinstance(value, Mapping) else []
    if isinstance(value, Mapping) and not missing:
        return value
    problem = f"got {type(value).__name__} {_shown(value)}"
    if missing:
        problem += f" (it lacks {missing[0]!r}" + (
            f" and {len(missing) - 1} more)" if len(missing) > 1 else ")"
        )
    raise ConfigurationError(f"{where} must be a {schema.__name__}, {problem}")


def _shown(value: object, width: int = 40) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def message_text(message: BaseMessage) -> str:
    """The message's text: string content, or the text blocks of list content joined."""
    return message.text.strip()


def message_time(message: BaseMessage) -> datetime.datetime | None:
    """When the message was said: ``additional_kwargs["timestamp"]`` parsed as ISO 8601
    (a ``datetime`` is accepted as is). ``None`` when absent or unparsable: a bad timestamp
    costs the note its time, never the compaction."""
    value = message.additional_kwargs.get(TIMESTAMP_KEY)
    if isinstance(value, datetime.datetime):
        return value
    if isinstance(value, str):
        try:
            return datetime.datetime.fromisoformat(value)
        except ValueError:
            return None
    return None


def speaker(message: BaseMessage) -> str:
    """The label notes use for whoever said ``message``: its ``name`` when set, else its role
    ("User", "Assistant", "System", the tool's name for a tool result)."""
    if message.name:
        return message.name
    if isinstance(message, HumanMessage):
        return "User"
    if isinstance(message, AIMessage):
        return "Assistant"
    if isinstance(message, SystemMessage):
        return "System"
    if isinstance(message, ToolMessage):
        return "Tool"
    if isinstance(message, ChatMessage):
        return message.role.capitalize() or "Unknown"
    return message.type.capitalize()


def tool_call_ids(message: BaseMessage) -> set[str]:
    """The tool-call ids that tie ``message`` to others: the calls an AI message makes, or
    the call a tool message answers."""
    if isinstance(message, AIMessage):
        return {call_id for call in message.tool_calls if (call_id := call.get("id"))}
    if isinstance(message, ToolMessage):
        return {message.tool_call_id}
    return set()


@dataclass(frozen=True)
class Cut:
    """Where to split a history: ``messages[start:end]`` are compressed; the leading system
    messages ``messages[:start]`` and the window ``messages[end:]`` are kept verbatim."""

    start: int
    end: int


def choose_cut(
    messages: Sequence[BaseMessage], keep_tokens: int, count: TokenCounter
) -> Cut | None:
    """The cut that keeps the longest recent window within ``keep_tokens``, or ``None``.

    A cut is *valid* when:

    - the compressed part is not empty, follows the leading system messages, and every
      message in it has an id (``RemoveMessage`` needs one);
    - the kept window is not empty and starts with a ``HumanMessage``;
    - no tool-call id is shared between the compressed part and the kept part, so an AI
      tool call and its tool results are compressed or kept together.

    Among valid cuts, the one compressing the least while the kept messages (leading system
    messages included) count at most ``keep_tokens``; when none fits, the one compressing
    the most. ``None`` when no cut is valid. ``count`` must not decrease as messages are
    added (true of any per-message sum, such as ``count_tokens_approximately``).
    """
    start = 0
    while start < len(messages) and isinstance(messages[start], SystemMessage):
        start += 1
    valid = _valid_ends(messages, start)
    if not valid:
        return None
    head = list(messages[:start])
    for end in valid:
        if count([*head, *messages[end:]]) <= keep_tokens:
            return Cut(start, end)
    return Cut(start, valid[-1])


def _valid_ends(messages: Sequence[BaseMessage], start: int) -> list[int]:
    """Every valid ``end`` for compressing ``messages[start:end]``, ascending."""
    last_seen: dict[str, int] = {}  # tool-call id -> the last message carrying it
    for index, message in enumerate(messages):
        for call_id in tool_call_ids(message):
            last_seen[call_id] = index
    ends: list[int] = []
    reach = -1  # the last message tied by a tool call to one already compressed
    for end in range(start + 1, len(messages)):
        previous = messages[end - 1]
        if not previous.id:
            break  # every longer prefix contains this id-less message too
        for call_id in tool_call_ids(previous):
            reach = max(reach, last_seen[call_id])
        if reach < end and isinstance(messages[end], HumanMessage):
            ends.append(end)
    return ends

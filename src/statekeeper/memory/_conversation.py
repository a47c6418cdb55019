"""Message-window helpers: who said a message, when, and where a history may be cut.

The cut rules are the conversation invariants :class:`~statekeeper.memory.node.SummarizationNode`
promises; keeping them in pure functions over a list of messages lets the property tests
state them directly.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

__all__ = [
    "TIMESTAMP_KEY",
    "Cut",
    "choose_cut",
    "message_text",
    "message_time",
    "speaker",
    "tool_call_ids",
]

TIMESTAMP_KEY = "timestamp"  # additional_kwargs key holding when a message was said (ISO 8601)

TokenCounter = Callable[[Sequence[BaseMessage]], int]


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

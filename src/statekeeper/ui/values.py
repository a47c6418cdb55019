"""Stored values as the pages show them: plain JSON data, chats, sizes and changes.

Everything here is display only: it never changes what is stored, and it turns any
value (messages, pydantic models, data classes, bytes...) into plain JSON data first
(``statekeeper._console.jsonable``, as the CLI's ``--json`` does), so a template only
ever sees dicts, lists, strings, numbers, booleans and ``None``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from statekeeper import _console
from statekeeper.threads import Change

__all__ = [
    "ChannelChange",
    "ChatMessage",
    "as_chat",
    "channel_change",
    "dumps",
    "is_state_channel",
    "plain",
    "size_of",
    "split_channels",
]


def plain(value: Any) -> Any:
    """``value`` as plain JSON data (non-finite floats as text, so any value encodes)."""
    return _finite(_console.jsonable(value))


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


def dumps(value: Any, *, indent: int | None = 2) -> str:
    """``value`` as JSON text, unicode kept readable."""
    return json.dumps(plain(value), indent=indent, ensure_ascii=False)


def size_of(value: Any) -> int:
    """The size of ``value`` in bytes, as compact UTF-8 JSON: a measure that means the
    same for every backend and serializer."""
    return len(json.dumps(plain(value), ensure_ascii=False, separators=(",", ":")).encode())


def is_state_channel(name: str) -> bool:
    """Whether a stored channel holds a state field rather than LangGraph's bookkeeping
    (``__start__``, ``__pregel_tasks``, ``branch:to:node``, ``join:...``)."""
    return name.isidentifier() and not name.startswith("__")


def split_channels(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``values`` split into the state fields and LangGraph's own channels."""
    state = {key: value for key, value in values.items() if is_state_channel(key)}
    internal = {key: value for key, value in values.items() if not is_state_channel(key)}
    return state, internal


@dataclass(frozen=True)
class ChatMessage:
    """One message of a chat, as shown: who said it, what, and which tools it called."""

    role: str
    content: str | None  # text content; None when the content is a list of blocks
    blocks: list[Any] = field(default_factory=list)  # the content blocks, plain
    name: str | None = None
    id: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    tool_call_id: str | None = None


def _is_message(value: Any) -> bool:
    return hasattr(value, "content") and hasattr(value, "type")


def as_chat(value: Any) -> list[ChatMessage] | None:
    """A list of LangChain messages as a chat; ``None`` when ``value`` is not one."""
    if not isinstance(value, list | tuple) or not value:
        return None
    if not all(_is_message(item) for item in value):
        return None
    chat = []
    for message in value:
        content = message.content
        text = content if isinstance(content, str) else None
        calls = [
            {
                "name": str(call.get("name", "?")),
                "args": plain(call.get("args", {})),
                "id": call.get("id"),
            }
            for call in getattr(message, "tool_calls", None) or ()
            if isinstance(call, Mapping)
        ]
        chat.append(
            ChatMessage(
                role=str(message.type),
                content=text,
                blocks=[] if text is not None else plain(content),
                name=_text(getattr(message, "name", None)),
                id=_text(getattr(message, "id", None)),
                tool_calls=calls,
                tool_call_id=_text(getattr(message, "tool_call_id", None)),
            )
        )
    return chat


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True)
class ChannelChange:
    """A :class:`~statekeeper.threads.Change` as shown: plain values and sizes (bytes of
    compact JSON) before and after. For ``"appended"``, ``new`` holds the new items and
    ``size_after`` is the whole list's."""

    channel: str
    kind: str
    old: Any
    new: Any
    size_before: int | None
    size_after: int | None
    count_before: int | None  # items, for lists
    count_after: int | None

    @property
    def size_change(self) -> int:
        return (self.size_after or 0) - (self.size_before or 0)


def channel_change(change: Change, old_values: Mapping[str, Any]) -> ChannelChange:
    """``change`` (from ``threads.diff_values(old_values, ...)``) ready to show."""
    before: Any = old_values.get(change.channel) if change.kind != "added" else None
    if change.kind == "appended":
        after: Any = [*before, *change.new]
    elif change.kind == "removed":
        after = None
    else:
        after = change.new
    return ChannelChange(
        channel=change.channel,
        kind=change.kind,
        old=plain(change.old),
        new=plain(change.new),
        size_before=None if change.kind == "added" else size_of(before),
        size_after=None if change.kind == "removed" else size_of(after),
        count_before=len(before) if isinstance(before, list | tuple) else None,
        count_after=len(after) if isinstance(after, list | tuple) else None,
    )

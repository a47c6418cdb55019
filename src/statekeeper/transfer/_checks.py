"""The checks a dump's lines must pass, as :func:`~statekeeper.transfer._dump.read_dump`
makes them: text that decodes as UTF-8, one strict JSON object per line (no duplicate
keys, no ``NaN`` or ``Infinity``), records of the expected shape, and parent links that
form a history.

Every check raises :class:`Invalid`, whose message says what is wrong; the reader adds
the line. :class:`ThreadHistory` guarantees that the parent links of a thread's records
form a forest (no checkpoint twice, no cycle, parents before their children) and that
each record's ``new_versions`` is exactly what its parent's versions make new.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NoReturn

from langgraph.checkpoint.base import ChannelVersions

from statekeeper._storage.payload import check_id
from statekeeper.errors import SerializationError
from statekeeper.transfer.records import new_versions

__all__ = [
    "Invalid",
    "ThreadHistory",
    "channel_versions",
    "check_keys",
    "check_text",
    "checkpoint_fields",
    "decoded",
    "json_object",
    "parse",
]


class Invalid(Exception):
    """A line breaks the format; the message says how (the caller adds the line)."""


# -- text and JSON ----------------------------------------------------------------------

_NOT_UTF8 = "not UTF-8 text; a dump is UTF-8 JSON Lines, as export writes it"
_SURROGATE = re.compile("[\ud800-\udfff]")  # a JSON escape of one is ASCII: never matched


def decoded(lines: Iterable[str]) -> Iterator[str]:
    """``lines``, where a stream that fails to decode is the dump's error. A stream
    decodes ahead of the line it returns, so the bad bytes are on the line named or on
    one soon after it."""
    read = 0
    try:
        for line in lines:
            read += 1
            yield line
    except UnicodeDecodeError:
        raise SerializationError(f"dump line {read + 1} (or one soon after): {_NOT_UTF8}") from None


def check_text(line: str) -> None:
    """Raise :class:`Invalid` if ``line`` holds bytes a surrogateescape stream could not
    decode (so it is not UTF-8 text)."""
    if not line.isascii() and _SURROGATE.search(line):
        raise Invalid(_NOT_UTF8)


def parse(line: str) -> dict[str, Any]:
    try:
        obj = json.loads(line, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except Invalid:
        raise
    except (ValueError, RecursionError) as exc:
        raise Invalid(f"not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise Invalid("not a JSON object")
    return obj


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise Invalid("an object has the same key twice")
    return obj


def _no_constant(name: str) -> NoReturn:
    raise Invalid(f"{name} is not a JSON number")


# -- the shape of a record --------------------------------------------------------------


def checkpoint_fields(value: Any) -> dict[str, Any]:
    """A checkpoint without its id and values: LangGraph's fields, checked for shape."""
    fields = json_object(value, "checkpoint")
    for forbidden in ("id", "channel_values"):
        if forbidden in fields:
            raise Invalid(f"checkpoint has a field {forbidden!r}; it belongs elsewhere")
    channel_versions(fields.get("channel_versions"), "checkpoint.channel_versions")
    for node, seen in json_object(fields.get("versions_seen"), "checkpoint.versions_seen").items():
        channel_versions(seen, f"checkpoint.versions_seen[{node!r}]")
    if not isinstance(fields.get("ts"), str):
        raise Invalid("checkpoint.ts must be text")
    return fields


def check_keys(obj: dict[str, Any], expected: set[str], what: str) -> None:
    if missing := sorted(expected - obj.keys()):
        raise Invalid(f"{what} lacks {', '.join(map(repr, missing))}")
    if unknown := sorted(obj.keys() - expected):
        raise Invalid(f"{what} has unknown fields {', '.join(map(repr, unknown))}")


def json_object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Invalid(f"{what} must be a JSON object")
    return value


def channel_versions(value: Any, what: str) -> ChannelVersions:
    for channel, version in json_object(value, what).items():
        check_id(channel, "channel name", allow_empty=True)
        if isinstance(version, bool) or not isinstance(version, str | int | float):
            raise Invalid(f"{what}[{channel!r}] must be a text or number version")
    return value  # type: ignore[no-any-return]


# -- parent links -----------------------------------------------------------------------


@dataclass
class ThreadHistory:
    """What checking one thread's records needs: its checkpoints' versions so far."""

    thread_id: str
    versions: dict[tuple[str, str], ChannelVersions] = field(default_factory=dict)
    missing_parents: dict[tuple[str, str], int] = field(default_factory=dict)  # -> child line
    parents: dict[tuple[str, str], str | None] = field(default_factory=dict)

    def place(
        self,
        number: int,
        key: tuple[str, str],
        parent_id: str | None,
        versions: ChannelVersions,
        changed: ChannelVersions,
    ) -> None:
        """Check checkpoint ``key`` (namespace, id) of line ``number`` against the records
        before it: new, not its own ancestor, not a parent of an earlier record, and
        ``changed`` (its ``new_versions``) exactly what its parent's versions make new. So
        the parent links of a thread's records form a forest: a cycle is refused, as
        itself or as a parent after its child."""
        ns, checkpoint_id = key
        if key in self.versions:
            raise Invalid(f"checkpoint {checkpoint_id!r} appears twice in the thread")
        cycle = key in self.missing_parents and self._cycle(key, parent_id)
        if parent_id == checkpoint_id or cycle:
            raise Invalid(
                f"checkpoint {checkpoint_id!r} of thread {self.thread_id!r} is its own "
                f"{'parent' if parent_id == checkpoint_id else 'ancestor'}: parent links "
                "must form a history, not a cycle"
            )
        if key in self.missing_parents:
            raise Invalid(
                f"checkpoint {checkpoint_id!r} of thread {self.thread_id!r} comes after its "
                f"child on line {self.missing_parents[key]}; parents must come first"
            )
        parent = self.versions.get((ns, parent_id)) if parent_id is not None else None
        if parent_id is not None and parent is None:
            self.missing_parents.setdefault((ns, parent_id), number)
        if not _same_versions(changed, new_versions(versions, parent)):
            if parent_id is not None and parent is None:
                raise Invalid(
                    f"parent checkpoint {parent_id!r} is not before it in the dump; parents "
                    "must come first (a checkpoint whose parent is not in the dump at all "
                    "carries every channel in new_versions)"
                )
            raise Invalid(
                "new_versions must list exactly the channels whose version differs from the "
                "parent checkpoint's (all of them when the parent is not in the dump)"
            )
        self.versions[key] = versions
        self.parents[key] = parent_id

    def _cycle(self, key: tuple[str, str], parent_id: str | None) -> bool:
        """Whether ``key``'s ancestors among the records so far (a forest) lead to ``key``."""
        at = parent_id
        while at is not None and (key[0], at) in self.parents:
            at = self.parents[key[0], at]
            if at == key[1]:
                return True
        return False


def _same_versions(a: ChannelVersions, b: ChannelVersions) -> bool:
    return a.keys() == b.keys() and all(type(a[ch]) is type(b[ch]) and a[ch] == b[ch] for ch in a)

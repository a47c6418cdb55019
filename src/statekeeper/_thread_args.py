"""The arguments of :func:`statekeeper.threads.list_threads` and ``page_threads``, checked
before anything is read, each refused with a one-line ``ConfigurationError``; and the
opaque cursor that opens the next page of threads."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from typing import Any

from statekeeper.checkpointers.heads import Head
from statekeeper.errors import ConfigurationError

__all__ = ["check_limit", "check_listing", "decode_cursor", "encode_cursor"]

_WIDTH = 40  # widest argument repeated in a message


def check_limit(limit: Any, *, optional: bool) -> None:
    """Refuse a ``limit`` that is not a positive int (nor ``None``, when ``optional``)."""
    if not (limit is None and optional) and (type(limit) is not int or limit < 1):
        raise ConfigurationError(f"limit must be at least 1, got {_shown(limit)}")


def check_listing(
    known: tuple[str, ...],
    *,
    after: Any = None,
    status: Any = None,
    metadata: Any = None,
    match: Any = None,
) -> frozenset[str] | None:
    """Refuse a listing's filters of the wrong type or value: ``after`` a thread id,
    ``status`` one of ``known`` or several of them, ``metadata`` a mapping with ``str``
    keys, ``match`` text. Returns the statuses asked for (``None``: any)."""
    if after is not None and not isinstance(after, str):
        raise _wrong("after", "a thread id (text)", after)
    if metadata is not None and not (
        isinstance(metadata, Mapping) and all(isinstance(key, str) for key in metadata)
    ):
        raise _wrong("metadata", "a mapping of str keys to the values to match", metadata)
    if match is not None and not isinstance(match, str):
        raise _wrong("match", "text to find in thread ids", match)
    return _statuses(status, known)


def _statuses(status: Any, known: tuple[str, ...]) -> frozenset[str] | None:
    if status is None:
        return None
    if isinstance(status, str):
        wanted = [status]
    elif isinstance(status, Iterable) and not isinstance(status, bytes | Mapping):
        wanted = list(status)
    else:
        raise _wrong("status", f"one of {', '.join(known)}, or several of them", status)
    for item in wanted:
        if not isinstance(item, str) or item not in known:
            raise ConfigurationError(
                f"unknown status {_shown(item)}; use one of {', '.join(known)}"
            )
    return frozenset(wanted)


def encode_cursor(head: Head) -> str:
    """The cursor of the page that ends at ``head``."""
    text = json.dumps([head.checkpoint_id, head.thread_id], ensure_ascii=False)
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(cursor: object) -> Head:
    """The head a cursor from :func:`encode_cursor` names; a ConfigurationError for any
    other value."""
    place: Any = None
    if isinstance(cursor, str):
        try:
            place = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        except ValueError:  # not base64, not UTF-8 or not JSON
            place = None
    if not (isinstance(place, list) and len(place) == 2 and all(type(p) is str for p in place)):
        raise ConfigurationError(
            f"cursor {_shown(cursor)} is not one a page of threads returned; start again "
            "from the first page"
        )
    return Head(place[1], place[0])


def _wrong(name: str, wanted: str, value: object) -> ConfigurationError:
    return ConfigurationError(
        f"{name} must be {wanted}, got {type(value).__name__} {_shown(value)}"
    )


def _shown(value: object) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= _WIDTH else text[: _WIDTH - 1] + "…"

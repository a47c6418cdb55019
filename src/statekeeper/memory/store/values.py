"""What a memory store does with a value: encode it, pick its text, filter it, and pack its
embeddings. Every backend (SQLite, files, Redis) uses these; nothing here touches storage."""

from __future__ import annotations

import json
import math
import operator
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langgraph.store.base import get_text_at_path, tokenize_path

from statekeeper._storage.json import json_equal
from statekeeper.errors import ConfigurationError, SerializationError
from statekeeper.memory.notes import NOTE_KIND
from statekeeper.memory.store.checks import FILTER_OPERATORS, MAX_DEPTH, deeper_than, shown

__all__ = [
    "FILTER_OPERATORS",
    "Fields",
    "cosine",
    "decode_value",
    "encode_value",
    "indexed_texts",
    "matches_filter",
    "pack_vector",
    "parse_fields",
    "unpack_vector",
]

# Paths to index, each with its tokenized form (as LangGraph's stores keep them).
Fields = tuple[tuple[str, list[str]], ...]

WHOLE_VALUE = "$"
# A note's searchable text: what it says and its topics, not its provenance (thread ids,
# timestamps and the summarizer's name would match queries that have nothing to do with it).
_NOTE_FIELDS: Fields = (("text", ["text"]), ("topics[*]", ["topics", "[*]"]))
_WHOLE: Fields = ((WHOLE_VALUE, [WHOLE_VALUE]),)


def encode_value(value: Mapping[str, Any]) -> str:
    """The value as JSON text; it comes back equal to what was given, or this raises.

    Raises:
        SerializationError: the value is not JSON (a set, a datetime, NaN, a non-string
            key) or would not come back as given (a tuple comes back as a list), or nests
            more than ``MAX_DEPTH`` levels.
    """
    if deeper_than(value, MAX_DEPTH):
        raise SerializationError(
            f"store values nest at most {MAX_DEPTH} levels of objects and lists; this one is "
            "deeper (or contains itself)"
        )
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        if not isinstance(value, dict) or json.loads(text) != value:
            raise TypeError("it would come back altered (a tuple as a list, a key as text)")
    except (TypeError, ValueError, RecursionError) as exc:
        raise SerializationError(
            f"store values must be JSON objects of strings, numbers, booleans, None, lists "
            f"and objects with string keys; this one cannot be stored exactly: {exc}"
        ) from None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate survives only as a \\u escape.
        text = json.dumps(value, allow_nan=False, separators=(",", ":"))
    return text


def decode_value(text: str) -> dict[str, Any]:
    """A stored value, as a new object (callers may change it)."""
    value: dict[str, Any] = json.loads(text)
    return value


def parse_fields(fields: Sequence[str] | None) -> Fields | None:
    """Tokenize index paths (LangGraph's syntax: ``"a.b"``, ``"a[*].b"``, ``"$"``);
    ``None`` for the default, which depends on the value (see :func:`indexed_texts`)."""
    if fields is None:
        return None
    if not isinstance(fields, list | tuple) or not all(isinstance(f, str) and f for f in fields):
        raise ConfigurationError(f"index fields must be a list of paths, got {shown(fields)}")
    return tuple((f, [WHOLE_VALUE] if f == WHOLE_VALUE else tokenize_path(f)) for f in fields)


def indexed_texts(value: Mapping[str, Any], fields: Fields | None) -> list[tuple[str, str]]:
    """The ``(path, text)`` pairs of ``value`` that search looks at.

    ``fields`` ``None`` means a note's ``text`` and ``topics``, or every string in any
    other value. ``"$"`` is every string in the value (not its keys), as one text; a path
    naming several texts (``"topics[*]"``) yields ``"topics[*].0"``, ``"topics[*].1"``...
    """
    if fields is None:
        fields = _NOTE_FIELDS if value.get("kind") == NOTE_KIND else _WHOLE
    found: list[tuple[str, str]] = []
    for path, tokens in fields:
        if tokens == [WHOLE_VALUE]:
            texts = ["\n".join(_strings(value))]
        else:
            texts = get_text_at_path(value, tokens)
        named = [(path, texts[0])] if len(texts) == 1 else list(_numbered(path, texts))
        found.extend((name, text) for name, text in named if text.strip())
    return found


def matches_filter(value: Mapping[str, Any], conditions: Mapping[str, Any]) -> bool:
    """Whether ``value`` meets every condition of a LangGraph search filter.

    A key names a top-level field exactly, whatever characters it holds; when the value
    has no such field and the key has dots, it is read as a path (``"provenance.thread_id"``,
    as LangGraph's SqliteStore reads it). A missing field is ``None``. An expected value
    that is a mapping with ``$`` operators compares (``$eq $ne $gt $gte $lt $lte``); a plain
    mapping matches the fields it names; a list matches element by element; anything else
    is JSON equality (``True`` never equals ``1``). Order operators compare numbers with
    numbers and strings with strings; other pairs do not match. Check the filter with
    :func:`~statekeeper.memory.store.checks.check_filter` first.
    """
    return all(_meets(_field(value, key), expected) for key, expected in conditions.items())


_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    "$gt": operator.gt,
    "$gte": operator.ge,
    "$lt": operator.lt,
    "$lte": operator.le,
}


def _field(value: Mapping[str, Any], key: str) -> Any:
    if key in value or "." not in key:
        return value.get(key)
    current: Any = value
    for part in key.split("."):
        if not isinstance(current, dict) or part not in current:
            return None
        current = current[part]
    return current


def _meets(actual: Any, expected: Any) -> bool:
    if isinstance(expected, Mapping):
        if any(isinstance(k, str) and k.startswith("$") for k in expected):
            return all(_apply(actual, op, operand) for op, operand in expected.items())
        return isinstance(actual, dict) and all(
            _meets(actual.get(k), v) for k, v in expected.items()
        )
    if isinstance(expected, list | tuple):
        return (
            isinstance(actual, list)
            and len(actual) == len(expected)
            and all(_meets(a, e) for a, e in zip(actual, expected, strict=True))
        )
    return json_equal(actual, expected)


def _apply(actual: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return json_equal(actual, operand)
    if op == "$ne":
        return not json_equal(actual, operand)
    compare = _ORDER[op]
    if _is_number(actual) and _is_number(operand):
        return compare(actual, operand)
    return isinstance(actual, str) and isinstance(operand, str) and compare(actual, operand)


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list | tuple):
        return [s for item in value for s in _strings(item)]
    return []


def _numbered(path: str, texts: list[str]) -> list[tuple[str, str]]:
    return [(f"{path}.{i}", text) for i, text in enumerate(texts)]


# -- embeddings ------------------------------------------------------------------------


def pack_vector(vector: Sequence[float], dims: int | None) -> bytes:
    """An embedding as stored: normalised to length 1, little-endian float32.

    Raises:
        ConfigurationError: the embedding model returned something other than ``dims``
            finite numbers.
    """
    if dims is not None and len(vector) != dims:
        raise ConfigurationError(
            f"the embedding model returned {len(vector)} numbers, but the store's index "
            f"says dims={dims}; fix the index configuration"
        )
    values = [float(x) for x in vector]
    if not all(math.isfinite(x) for x in values):
        raise ConfigurationError("the embedding model returned a vector with NaN or infinity")
    norm = math.sqrt(math.fsum(x * x for x in values)) or 1.0
    return struct.pack(f"<{len(values)}f", *(x / norm for x in values))


def unpack_vector(blob: bytes) -> tuple[float, ...]:
    """A stored embedding (unit length, or all zeros)."""
    return struct.unpack(f"<{len(blob) // 4}f", blob)


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two unit vectors; 0 for vectors of different sizes (made by
    another model: they cannot be compared)."""
    if len(a) != len(b):
        return 0.0
    return float(sum(map(operator.mul, a, b)))

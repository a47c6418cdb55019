"""How every backend turns values into stored bytes and back.

All payloads go through the saver's ``serde`` (so ``EncryptedSerializer`` and
``with_allowlist`` keep working); nothing here pickles. On top of ``serde`` this module adds
guarantees shared by every backend:

* exactness: a value that ``serde`` would silently alter (LangGraph's msgpack encoder turns
  lone surrogates such as ``"\\ud800"`` into ``"?"``) raises :class:`SerializationError`
  instead of being stored altered; so does a value holding an msgpack extension no reader
  knows (an ``ormsgpack.Ext`` of another code would read back as ``None``);
* bounded depth: a value nested deeper than :data:`MAX_DEPTH` levels is refused with
  :class:`SerializationError` when written and when read (stored bytes that no write could
  have made), never a raw ``RecursionError`` later;
* no silent loss on read (with :func:`safe_serde`, the default): an unknown extension code,
  or a numpy array that cannot be rebuilt, raises :class:`SerializationError` where
  LangGraph's decoder would put ``None`` in its place;
* compactness: payloads of at least :data:`COMPRESS_MIN_BYTES` are zlib-compressed when
  that saves space, against a preset dictionary of the bytes every LangGraph payload
  repeats (codec :data:`ZLIB_DICT`); payloads compressed before it (codec ``"zlib"``) read
  as they were. The codec is stored next to the bytes, so reading never guesses.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
import zlib
from collections.abc import Iterable, Mapping
from decimal import Decimal
from enum import Enum
from typing import Any
from uuid import UUID

from langgraph.checkpoint.serde.base import SerializerProtocol
from pydantic import BaseModel

from statekeeper._storage.serde import (
    MAX_DEPTH,
    check_extensions,
    safe_serde,
    too_deep,
    within_depth,
)
from statekeeper.errors import InvalidIdError, SerializationError

__all__ = [
    "COMPRESS_MIN_BYTES",
    "EMPTY",
    "MAX_DEPTH",
    "ZLIB_DICT",
    "check_id",
    "decode",
    "dumps",
    "encode",
    "ensure_exact",
    "loads",
    "pack",
    "safe_serde",
    "unpack",
]

COMPRESS_MIN_BYTES = 256
_ZLIB_LEVEL = 3  # close to level 6's ratio on chat text at about half its cost
EMPTY = ("empty", "", b"")  # stored for a channel version that has no value
ZLIB_DICT = "zlib+d1"  # zlib with the preset dictionary below

# What a small payload cannot compress on its own because it says it only once: serde's
# msgpack of LangChain's message classes with their field names (an AIMessage with tool
# calls and usage metadata, a ToolMessage, a SystemMessage), of a checkpoint without its
# values, of a HumanMessage, an AIMessage and a graph input; the commonest last, where
# zlib reaches it in the fewest bits. A chat message compresses to about 0.8x of plain
# zlib's bytes, a checkpoint to 0.65x. Frozen: a payload written with it reads only with
# these exact bytes (zlib checks the dictionary's Adler-32), so a new dictionary needs a
# new codec name.
_DICTIONARY_1 = (
    b"\xc8\x01\xe2\x05\x94\xbalangchain_core.messages.ai\xa9AIMessage\x89\xa7content\xa0"
    b"\xb1additional_kwargs\x80\xb1response_metadata\x85\xabtoken_usage\x83\xb1completion"
    b"_tokens\x00\xadprompt_tokens\x00\xactotal_tokens\x00\xaamodel_name\xa0\xb2system_fi"
    b"ngerprint\xa0\xadfinish_reason\xa4stop\xa8logprobs\xc0\xa4type\xa2ai\xa4name\xc0"
    b"\xa2id\xd9)run--00000000-0000-0000-0000-000000000000\xaatool_calls\x91\x84\xa4name"
    b"\xa0\xa4args\x80\xa2id\xa5call_\xa4type\xa9tool_call\xb2invalid_tool_calls\x90\xaeu"
    b"sage_metadata\x85\xacinput_tokens\x00\xadoutput_tokens\x00\xactotal_tokens\x00\xb3i"
    b"nput_token_details\x81\xaacache_read\x00\xb4output_token_details\x81\xa9reasoning"
    b"\x00\xb3model_validate_json\xc7\xae\x05\x94\xbclangchain_core.messages.tool\xabTool"
    b"Message\x89\xa7content\xa0\xb1additional_kwargs\x80\xb1response_metadata\x80\xa4typ"
    b"e\xa4tool\xa4name\xa0\xa2id\xc0\xactool_call_id\xa5call_\xa8artifact\xc0\xa6status"
    b"\xa7success\xb3model_validate_json\xc7\x88\x05\x94\xbelangchain_core.messages.syste"
    b"m\xadSystemMessage\x86\xa7content\xa0\xb1additional_kwargs\x80\xb1response_metadata"
    b"\x80\xa4type\xa6system\xa4name\xc0\xa2id\xc0\xb3model_validate_json\x86\xa1v\x04"
    b"\xa2ts\xd9 2026-01-01T00:00:00.000000+00:00\xa2id\xd9$00000000-0000-0000-0000-00000"
    b"0000000\xb0channel_versions\x83\xa9__start__\xd9$00000000000000000000000000000001.0"
    b".5\xa8messages\xd9$00000000000000000000000000000001.0.5\xaabranch:to:\xd9$000000000"
    b"00000000000000000000001.0.5\xadversions_seen\x83\xa9__input__\x80\xa9__start__\x81"
    b"\xa9__start__\xd9$00000000000000000000000000000001.0.5\xa0\x81\xaabranch:to:\xd9$00"
    b"000000000000000000000000000001.0.5\xb0updated_channels\x92\xa8messages\xaabranch:to"
    b":\xc7\x85\x05\x94\xbdlangchain_core.messages.human\xacHumanMessage\x86\xa7content"
    b"\xa0\xb1additional_kwargs\x80\xb1response_metadata\x80\xa4type\xa5human\xa4name\xc0"
    b"\xa2id\xc0\xb3model_validate_json\xc7\xac\x05\x94\xbalangchain_core.messages.ai\xa9"
    b"AIMessage\x89\xa7content\xa0\xb1additional_kwargs\x80\xb1response_metadata\x80\xa4t"
    b"ype\xa2ai\xa4name\xc0\xa2id\xc0\xaatool_calls\x90\xb2invalid_tool_calls\x90\xaeusag"
    b"e_metadata\xc0\xb3model_validate_json\x81\xa8messages\x91\xc7\x85\x05\x94\xbdlangch"
    b"ain_core.messages.human\xacHumanMessage\x86\xa7content\xa0\xb1additional_kwargs\x80"
    b"\xb1response_metadata\x80\xa4type\xa5human\xa4name\xc0\xa2id\xc0\xb3model_validate_"
    b"json"
)


def encode(
    serde: SerializerProtocol, value: Any, *, compress: bool, min_bytes: int = COMPRESS_MIN_BYTES
) -> tuple[str, str, bytes]:
    """Serialise ``value`` to ``(type, codec, bytes)``: :func:`dumps`, checked by
    :func:`ensure_exact` and :func:`check_extensions`, then packed by :func:`pack`.

    Raises:
        SerializationError: ``serde`` cannot encode the value, would alter it, or it is
            nested deeper than :data:`MAX_DEPTH` levels.
    """
    type_, data = dumps(serde, value)
    ensure_exact(value, type_, data)
    check_extensions(value, type_, data)
    return (type_, *pack(data, compress=compress, min_bytes=min_bytes))


def dumps(serde: SerializerProtocol, value: Any) -> tuple[str, bytes]:
    """``serde.dumps_typed(value)``, with its failures as :class:`SerializationError`."""
    try:
        return serde.dumps_typed(value)
    except Exception as exc:  # serde raises TypeError, ormsgpack errors, ...
        if too_deep(exc):
            raise SerializationError(
                f"cannot serialise a {type(value).__name__}: it is nested deeper than "
                f"{MAX_DEPTH} levels; store it flatter (e.g. as JSON text)"
            ) from exc
        where = _find_surrogate(value, "value")
        detail = f"the string at {where} contains a lone surrogate" if where else str(exc)
        raise SerializationError(
            f"cannot serialise a {type(value).__name__}: {detail}; store only values the "
            "checkpointer's serde supports (encode unpaired surrogates first)"
        ) from exc


def ensure_exact(value: Any, type_: str, data: bytes) -> None:
    """Raise :class:`SerializationError` if ``data`` (``value`` as ``serde`` wrote it, or
    the part of it that ``value`` accounts for) lost a character of a string in ``value``.

    msgpack replaces surrogate code points with "?": only a payload containing "?" (or one
    we cannot inspect because it is encrypted) can have been altered, so only then look:
    first with :func:`_scan` (plain data and pydantic models, e.g. chat messages), else
    with the ``json.dumps`` screen; a value either finds suspect is walked exactly.
    """
    if not type_.startswith("msgpack") or (type_ == "msgpack" and b"?" not in data):
        return
    suspect = _scan(value)
    if suspect is None:
        suspect = _may_hold_surrogate(value)
    if suspect:
        where = _find_surrogate(value, "value")
        if where is not None:
            raise SerializationError(
                f"the string at {where} contains a lone surrogate, which the serializer "
                "would silently replace with '?'; encode it first (e.g. with "
                "str.encode('utf-8', 'surrogatepass')) or store it as bytes"
            )


def pack(data: bytes, *, compress: bool, min_bytes: int = COMPRESS_MIN_BYTES) -> tuple[str, bytes]:
    """``(codec, bytes)``: zlib with the preset dictionary (:data:`ZLIB_DICT`) when asked,
    when ``data`` has ``min_bytes`` or more and it saves 10%."""
    if compress and len(data) >= min_bytes:
        packer = zlib.compressobj(
            _ZLIB_LEVEL, zlib.DEFLATED, zlib.MAX_WBITS, 8, zlib.Z_DEFAULT_STRATEGY, _DICTIONARY_1
        )
        packed = packer.compress(data) + packer.flush()
        if len(packed) < len(data) * 0.9:
            return ZLIB_DICT, packed
    return "", data


def unpack(codec: str, data: bytes) -> bytes:
    """Inverse of :func:`pack`.

    Raises:
        SerializationError: the bytes are corrupt or use an unknown codec.
    """
    if codec == ZLIB_DICT:
        unpacker = zlib.decompressobj(zdict=_DICTIONARY_1)
        try:
            unpacked = unpacker.decompress(data) + unpacker.flush()
        except zlib.error as exc:
            raise SerializationError(f"a stored payload is corrupt (zlib: {exc})") from exc
        if not unpacker.eof or unpacker.unused_data:  # cut short, or bytes after its end
            raise SerializationError("a stored payload is corrupt (zlib: truncated or padded)")
        return unpacked
    if codec == "zlib":
        try:
            return zlib.decompress(data)
        except zlib.error as exc:
            raise SerializationError(f"a stored payload is corrupt (zlib: {exc})") from exc
    if codec:
        raise SerializationError(
            f"a stored payload uses codec {codec!r}, unknown to this statekeeper; upgrade it"
        )
    return data


def decode(serde: SerializerProtocol, type_: str, codec: str, data: bytes) -> Any:
    """Inverse of :func:`encode`.

    Raises:
        SerializationError: the bytes are corrupt, use an unknown codec, or ``serde``
            cannot read them.
    """
    return loads(serde, type_, unpack(codec, data))


def loads(serde: SerializerProtocol, type_: str, data: bytes, *, checked: bool = False) -> Any:
    """``serde.loads_typed((type_, data))``, with its failures as SerializationError, and
    a value nested deeper than any write allows (:data:`MAX_DEPTH`) refused too, unless
    ``checked``: the bytes are ones this process wrote, whose depth was checked then (the
    check re-encodes the value: a pass over it as long as the decoding)."""
    try:
        value = serde.loads_typed((type_, data))
    except SerializationError:
        raise
    except Exception as exc:
        raise SerializationError(
            f"cannot deserialise a stored {type_!r} payload: {exc}; it is corrupt or was "
            "written with another serde (e.g. a different encryption key)"
        ) from exc
    if not checked and len(data) > MAX_DEPTH and not within_depth(value):  # deeper: longer
        raise SerializationError(
            f"a stored {type_!r} payload is nested deeper than {MAX_DEPTH} levels, deeper "
            "than any value statekeeper writes: it is corrupt or was crafted"
        )
    return value


def check_id(value: object, what: str, *, allow_empty: bool = False) -> str:
    """Return ``value`` as a storable id, or raise :class:`InvalidIdError` saying why.

    Any unicode text is accepted (NUL, ``/``, ``..``, ``%`` and ``*`` included: ids are
    always bound as parameters, never spliced into paths, patterns or SQL); ints are
    converted to text. Rejected: other types, empty text where not allowed, and lone
    surrogates (they are not encodable as UTF-8, so no backend could store them exactly).
    """
    if type(value) is str and value.isascii() and (value or allow_empty):
        return value  # the usual id: ASCII text holds no surrogate (isascii() is O(1))
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise InvalidIdError(f"{what} must be a string, got {type(value).__name__}")
    if not value and not allow_empty:
        raise InvalidIdError(f"{what} must not be empty")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidIdError(
            f"{what} {value!r} contains a lone surrogate at index {exc.start}; "
            "ids must be valid unicode text"
        ) from None
    return value


class _Opaque(Exception):
    """Raised while screening a value holding an object whose strings we cannot see."""


_LEAVES = (bytes, bytearray, datetime.date, datetime.time, datetime.timedelta, UUID, Decimal)


def _expose(obj: Any) -> Any:
    """``json.dumps`` hook: the strings an object holds, or nothing for leaf types."""
    if isinstance(obj, _LEAVES):
        return None
    if isinstance(obj, set | frozenset):
        return list(obj)
    if isinstance(obj, Enum):
        return obj.value  # what serde stores of a member
    if hasattr(obj, "__dict__"):
        extra = getattr(obj, "__pydantic_extra__", None)  # a model's extra fields
        return {**vars(obj), **extra} if isinstance(extra, dict) and extra else vars(obj)
    if dataclasses.is_dataclass(obj):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    raise _Opaque


# Any surrogate code point, lone or next to another: msgpack replaces each with "?" (an
# astral character such as an emoji is one code point, never a surrogate, in a str).
_SURROGATE = re.compile("[\ud800-\udfff]")
_TEXTLESS = frozenset({int, float, bool, type(None), bytes, bytearray})
_SCAN_BUDGET = 1 << 20  # objects :func:`_scan` visits before leaving it to the json screen


def _scan(value: Any) -> bool | None:
    """Whether a string inside ``value`` holds a surrogate code point, when ``value`` is
    made of dicts, lists, tuples, scalars, bytes and pydantic models only (their fields and
    extra fields); ``None`` when it holds anything else (exact types only: a ``str``
    subclass, an enum, a dataclass... is left to :func:`_may_hold_surrogate`).
    ``str.isascii()`` is O(1), so chat text costs one call per string."""
    stack = [value]
    budget = _SCAN_BUDGET
    while stack:
        obj = stack.pop()
        kind = type(obj)
        if kind is str:
            if not obj.isascii() and _SURROGATE.search(obj) is not None:
                return True
        elif kind in _TEXTLESS:
            pass
        elif kind is list or kind is tuple:
            stack.extend(obj)
        elif kind is dict:
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif kind in _MODELS or (kind not in _NOT_MODELS and _is_model(kind)):
            stack.extend(obj.__dict__.values())
            if extra := obj.__pydantic_extra__:
                stack.extend(extra.keys())
                stack.extend(extra.values())
        else:
            return None
        budget -= 1
        if not budget:
            return None
    return False


_MODELS: set[type] = set()  # pydantic model classes _scan met
_NOT_MODELS: set[type] = set()


def _is_model(kind: type) -> bool:
    # Real subclasses only, read from the MRO: no ABC machinery (caches shared by threads)
    # and no virtual subclass, whose fields a model's __dict__ would not describe.
    known = _MODELS if BaseModel in kind.__mro__ else _NOT_MODELS
    if len(known) >= 1024:  # classes made on the fly: keep the sets bounded
        known.clear()
    known.add(kind)
    return known is _MODELS


def _may_hold_surrogate(value: Any) -> bool:
    """Screen for :func:`_find_surrogate`: ``False`` means no string inside ``value``
    holds a surrogate code point. ``json.dumps`` (in C, non-ASCII kept as is) exposes
    every string, and a text that is ASCII (an O(1) test) holds none."""
    try:
        text = json.dumps(value, default=_expose, check_circular=False, ensure_ascii=False)
    except (_Opaque, TypeError, ValueError, RecursionError):
        return True  # not screenable quickly: let the exact walk decide
    return not text.isascii() and _SURROGATE.search(text) is not None


def _find_surrogate(
    obj: Any, path: str, depth: int = 0, seen: dict[int, Any] | None = None
) -> str | None:
    """Return the path of the first string holding a surrogate code point inside ``obj``
    (each object is visited once: shared and cyclic references stay linear)."""
    if depth > 64:
        return None
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            return path
        return None
    if isinstance(obj, bytes | bytearray | int | float | bool) or obj is None:
        return None
    if seen is None:
        seen = {}
    if id(obj) in seen:
        return None
    seen[id(obj)] = obj  # held, so that no object made during the walk reuses its id
    return _find_inside(obj, path, depth + 1, seen)


# The walk's steps into what serde stores of a container or object, in serde's order. Each
# loops and recurses itself (no generator of parts in between): the walk is per string.


def _find_inside(obj: Any, path: str, depth: int, seen: dict[int, Any]) -> str | None:
    """:func:`_find_surrogate` in the parts of ``obj``: a mapping's keys and values, the
    items of a sequence or set, an enum member's value, an object's fields (a model's
    extra fields too); ``None`` for anything else."""
    if isinstance(obj, Mapping):
        return _find_in_entries(obj, path, depth, seen)
    if isinstance(obj, list | tuple | set | frozenset):
        return _find_in_items(obj, path, depth, seen)
    if isinstance(obj, Enum):  # serde stores a member's value
        return _find_surrogate(obj.value, f"{path}.value", depth, seen)
    if dataclasses.is_dataclass(obj) or hasattr(obj, "__dict__"):
        return _find_in_fields(_fields(obj), path, depth, seen)
    return None


def _find_in_entries(
    mapping: Mapping[Any, Any], path: str, depth: int, seen: dict[int, Any]
) -> str | None:
    for key, item in mapping.items():
        found = _find_surrogate(key, f"{path} key {key!r}", depth, seen)
        if found := found or _find_surrogate(item, f"{path}[{key!r}]", depth, seen):
            return found
    return None


def _find_in_items(items: Iterable[Any], path: str, depth: int, seen: dict[int, Any]) -> str | None:
    for index, item in enumerate(items):
        if found := _find_surrogate(item, f"{path}[{index}]", depth, seen):
            return found
    return None


def _find_in_fields(
    fields: dict[str, Any], path: str, depth: int, seen: dict[int, Any]
) -> str | None:
    for name, item in fields.items():
        found = _find_surrogate(name, f"{path} field {name!r}", depth, seen)
        if found := found or _find_surrogate(item, f"{path}.{name}", depth, seen):
            return found
    return None


def _fields(obj: Any) -> dict[str, Any]:
    """An object's fields as serde reads them, with a pydantic model's extra fields."""
    fields: dict[str, Any]
    if hasattr(obj, "__dict__"):
        fields = vars(obj)
    else:  # a slotted dataclass: its fields, not copies (asdict deep-copies)
        fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    extra = getattr(obj, "__pydantic_extra__", None)  # a model's extra fields
    if isinstance(extra, dict) and extra:
        fields = {**fields, **extra}
    return fields

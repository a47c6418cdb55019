"""The default serializer, and the checks that keep LangGraph's msgpack from losing data
silently (used by :mod:`statekeeper._storage.payload` on every write and read); and
readers that leave stored objects unbuilt, for listings that need none of them
(:func:`skeleton_reader`).

LangGraph's decoder turns what it cannot read into ``None``: an extension code it does not
know, a numpy array without numpy, the fields of an object whose nested extension failed.
ormsgpack writes an ``ormsgpack.Ext`` object found inside a value as it is. And a value
nested deeper than ormsgpack writes (:data:`MAX_DEPTH`) can still be read from bytes made
elsewhere, to fail later with a ``RecursionError``. Here each of these becomes a
:class:`SerializationError` at the write or the read that meets it.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
import threading
from enum import Enum
from typing import Any, TypeVar

import ormsgpack
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import (
    EXT_DELTA_SNAPSHOT,
    EXT_NUMPY_ARRAY,
    EXT_PYDANTIC_V1,
    EXT_PYDANTIC_V2,
    JsonPlusSerializer,
    _create_msgpack_ext_hook,
)
from pydantic import BaseModel

from statekeeper.errors import SerializationError

__all__ = [
    "MAX_DEPTH",
    "array_header",
    "array_header_length",
    "check_extensions",
    "element_count",
    "msgpack_reader",
    "safe_serde",
    "skeleton_reader",
    "too_deep",
    "within_depth",
]

# ormsgpack's own limit: the deepest a value (each object's fields counted from the
# object, as LangGraph encodes each object apart) can be nested and still be written
MAX_DEPTH = 255
_EXT_CODES = frozenset(range(EXT_DELTA_SNAPSHOT + 1))  # LangGraph's msgpack extensions
_OPTIONS = ormsgpack.OPT_NON_STR_KEYS
S = TypeVar("S", bound=BaseCheckpointSaver[Any])


def safe_serde() -> SerializerProtocol:
    """The default serializer: LangGraph's, allowed to rebuild data types only.

    LangGraph's default serializer imports any module and calls any callable named in the
    stored bytes, so a crafted checkpoint can call ``os.system``. This one rebuilds
    LangGraph's allowlisted types plus *data classes* — pydantic models, dataclasses,
    enums and named tuples — from modules the process has already imported; anything
    else comes back as inert data (with LangGraph's warning), and no module is imported.
    State types are always loaded (the graph uses them), so graphs work unchanged.
    """
    hook = _guarded(_create_msgpack_ext_hook(_LoadedDataTypes()))  # type: ignore[arg-type]
    return _SafeSerializer(allowed_msgpack_modules=None, __unpack_ext_hook__=hook)


class _SafeSerializer(JsonPlusSerializer):
    """LangGraph's serializer, whose reads refuse what its decoder would drop: an
    extension code it does not know, a numpy array it cannot rebuild (see
    :func:`_guarded`)."""

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        outer, _REFUSED.found = _REFUSED.found, []
        found = _REFUSED.found
        try:
            value = super().loads_typed(data)
        except Exception as exc:
            if found:
                raise _refusal(data[0], found) from exc
            raise
        finally:
            _REFUSED.found = outer
        if found:  # refused inside an object LangGraph then rebuilt without it
            raise _refusal(data[0], found)
        return value


class _Refused(threading.local):
    found: list[str] | None = None  # what the decoding under way in this thread refused


_REFUSED = _Refused()


def _guarded(hook: Any) -> Any:
    """``hook`` (LangGraph's msgpack extension hook), refusing what it would turn into
    ``None``. LangGraph's hook decodes an object's fields with itself, and catches what
    that raises: so the guard takes its place there too (the closure cell the hook calls
    itself through), and notes what it refuses where the caller looks
    (:class:`_SafeSerializer`), whatever LangGraph does with the exception."""

    def guarded(code: int, data: bytes) -> Any:
        if code not in _EXT_CODES:
            return _refuse(f"msgpack extension code {code}, which nothing statekeeper writes uses")
        value = hook(code, data)
        if value is None:  # an object is never None: LangGraph could not rebuild it
            if code == EXT_NUMPY_ARRAY:
                return _refuse("a numpy array that cannot be rebuilt here (is numpy installed?)")
            return _refuse(f"an msgpack extension (code {code}) whose data cannot be read")
        return value

    names = hook.__code__.co_freevars
    if "ext_hook" in names and hook.__closure__ is not None:
        hook.__closure__[names.index("ext_hook")].cell_contents = guarded
    return guarded


def _refuse(what: str) -> Any:
    if _REFUSED.found is not None:
        _REFUSED.found.append(what)
    raise ValueError(what)  # stops the decoding of this part


def _refusal(type_: str, found: list[str]) -> SerializationError:
    return SerializationError(
        f"a stored {type_!r} payload holds {found[0]}; it is corrupt or was written by "
        "other software, and is refused rather than read with None in its place"
    )


class _LoadedDataTypes:
    """An allowlist, in the shape LangGraph's msgpack hook asks ``key in allowlist`` of."""

    def __contains__(self, key: object) -> bool:
        if not (isinstance(key, tuple) and len(key) == 2):
            return False
        module = sys.modules.get(key[0])  # never import: importing runs the module's code
        cls = getattr(module, key[1], None) if module is not None else None
        if not isinstance(cls, type):
            return False
        return (
            issubclass(cls, BaseModel | Enum)
            or dataclasses.is_dataclass(cls)
            or (issubclass(cls, tuple) and hasattr(cls, "_fields"))
        )


def check_extensions(value: Any, type_: str, data: bytes, *, elements: int | None = None) -> None:
    """Raise :class:`SerializationError` if ``data`` (``value`` as msgpack; with
    ``elements``, the encodings of that many list items one after the other, as an append
    delta holds them) holds an extension no reader knows: ormsgpack writes an
    ``ormsgpack.Ext`` object inside a value as it is, and LangGraph's decoder would read an
    unknown code back as ``None``."""
    if type_ != "msgpack" or len(data) < 3:  # an extension takes 3 bytes at least
        return
    if elements is not None:  # made one array, so that every item is read
        data = array_header(elements) + data
    bad: list[str] = []

    def hook(code: int, payload: bytes) -> None:
        if code not in _EXT_CODES:
            bad.append(f"an msgpack extension (ormsgpack.Ext) of code {code}")
            return
        # an object as LangGraph encodes one: its parts (module, name, fields...) in a list,
        # whose fields may hold more
        parts = ormsgpack.unpackb(payload, ext_hook=hook, option=_OPTIONS)
        if code != EXT_DELTA_SNAPSHOT and not (isinstance(parts, list) and len(parts) >= 3):
            bad.append(f"an msgpack extension (ormsgpack.Ext) of code {code} that is not an object")

    try:
        ormsgpack.unpackb(data, ext_hook=hook, option=_OPTIONS)
    except (ValueError, TypeError) as exc:
        if not bad:
            bad.append(f"an msgpack extension that cannot be read back ({exc})")
    if bad:
        raise SerializationError(
            f"cannot serialise a {type(value).__name__}: it holds {bad[0]}, which would "
            "read back as None; store plain data or a data class instead"
        )


def array_header(count: int) -> bytes:
    """The msgpack header of an array of ``count`` elements (its shortest form, as
    msgpack writes it)."""
    if count < 16:
        return bytes([0x90 | count])
    if count < 1 << 16:
        return b"\xdc" + count.to_bytes(2, "big")
    return b"\xdd" + count.to_bytes(4, "big")


def array_header_length(data: bytes) -> int | None:
    """Length of the msgpack array header ``data`` starts with, or None if not an array."""
    if not data:
        return None
    first = data[0]
    if 0x90 <= first <= 0x9F:  # fixarray
        return 1
    if first == 0xDC:  # array 16
        return 3
    if first == 0xDD:  # array 32
        return 5
    return None


def element_count(data: bytes) -> int:
    """The element count in the msgpack array header ``data`` starts with."""
    first = data[0]
    if first == 0xDC:
        return int.from_bytes(data[1:3], "big")
    if first == 0xDD:
        return int.from_bytes(data[1:5], "big")
    return first & 0x0F


def within_depth(value: Any) -> bool:
    """Whether ``value`` is nested at most :data:`MAX_DEPTH` levels deep, counting an
    object's fields from the object (as LangGraph encodes them): what a write accepts.
    Checked by ormsgpack itself: first with one depth for the whole value (objects
    included), which is stricter and, for the usual state, a few percent of what
    decoding costs; only a value deeper than that is checked object by object."""
    try:
        ormsgpack.packb(value, default=_fields, option=_WHOLE)
    except (TypeError, ValueError, RecursionError):
        pass
    else:
        return True
    deep: list[BaseException] = []  # found inside an object (ormsgpack hides it)

    def apart(obj: Any) -> None:
        """An object's fields, checked with a depth of their own (then left out)."""
        inside = _fields(obj)
        if inside is not None:
            _pack(inside, apart, deep)

    _pack(value, apart, deep)
    return not deep


_WHOLE = _OPTIONS | ormsgpack.OPT_SERIALIZE_PYDANTIC


def _fields(obj: Any) -> Any:
    """What ormsgpack is to pack in place of an object it cannot pack itself: the
    object's fields (or a set's items), or nothing."""
    if isinstance(obj, set | frozenset):
        return list(obj)
    fields = getattr(obj, "__dict__", None)
    return fields if isinstance(fields, dict) else None


def _pack(value: Any, default: Any, deep: list[BaseException]) -> None:
    try:
        ormsgpack.packb(value, default=default, option=_OPTIONS)
    except (TypeError, ValueError, RecursionError) as exc:
        if too_deep(exc):
            deep.append(exc)


def too_deep(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps) says a value is nested too deeply."""
    current: BaseException | None = exc
    while current is not None:
        if isinstance(current, RecursionError) or "Recursion limit" in str(current):
            return True
        current = current.__cause__ or current.__context__
    return False


# -- reading without building objects (listings that need ids, metadata and progress) ---


def skeleton_reader(saver: S) -> S:
    """A copy of ``saver`` that reads checkpoints without building their data: in a
    msgpack payload, every pydantic model and numpy array is ``None``; everything else
    (ids, metadata, versions, the values that say where the graph stands: triggers,
    ``Send`` packets, join barriers) reads as ``saver`` reads it. Building a long chat's
    messages is most of what reading its history costs, and a thread's tree or a
    reference such as ``@5`` needs none of them."""
    return msgpack_reader(saver, _SKELETON)


def msgpack_reader(saver: S, reader: SerializerProtocol) -> S:
    """A copy of ``saver`` whose msgpack payloads ``reader`` reads (others, such as an
    encrypted one, the saver's own serde), and that writes nothing. (Copies with another
    serializer are how LangGraph applies its msgpack allowlist, so every saver has them.)"""
    copied = copy.copy(saver)
    copied.serde = _MsgpackBy(reader, saver.serde)
    return copied


class _MsgpackBy:
    """A serializer that reads msgpack payloads with another one, and writes nothing."""

    def __init__(self, msgpack: SerializerProtocol, inner: SerializerProtocol) -> None:
        self._msgpack = msgpack
        self._inner = inner

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        raise TypeError("a reader made by msgpack_reader does not write")

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        if data[0] == "msgpack":
            return self._msgpack.loads_typed(data)
        return self._inner.loads_typed(data)


def _unbuilt(hook: Any) -> Any:
    """LangGraph's msgpack extension ``hook``, except that pydantic models and numpy
    arrays, at any depth, are ``None``, their bytes unread; everything else is refused
    where :func:`safe_serde` refuses it (an unknown code, an object that cannot be
    rebuilt: see :func:`_guarded`, whose closure cell this takes over)."""
    guarded = _guarded(hook)

    def unbuilt(code: int, data: bytes) -> Any:
        if code in (EXT_PYDANTIC_V1, EXT_PYDANTIC_V2, EXT_NUMPY_ARRAY):
            return None
        return guarded(code, data)

    names = hook.__code__.co_freevars
    if "ext_hook" in names and hook.__closure__ is not None:
        hook.__closure__[names.index("ext_hook")].cell_contents = unbuilt
    return unbuilt


_SKELETON = _SafeSerializer(
    allowed_msgpack_modules=None,
    __unpack_ext_hook__=_unbuilt(_create_msgpack_ext_hook(_LoadedDataTypes())),  # type: ignore[arg-type]
)

"""The serde a transfer reads LangGraph's savers with: it rebuilds what statekeeper's own
serde allows and nothing else, and stands a :class:`Refused` marker in for the rest.

LangGraph's ``JsonPlusSerializer`` can store ``"pickle"`` payloads (``pickle_fallback``)
and, in its older ``"json"`` format, constructor envelopes (``{"lc": 2, "type":
"constructor", "id": [...]}``) that it revives by importing a module and calling what it
names. Here a pickle payload is never unpickled, a constructor envelope never revived,
and msgpack is read with :func:`~statekeeper._storage.serde.safe_serde` (data classes
from modules already imported; nothing imported, nothing else called). A value refused
is not an error at the read: it comes back as a :class:`Refused`, so the reader can say
which channel or write of which checkpoint it was (:func:`refusals_in`) and go on.

A checkpoint that ``SqliteSaver`` stores as one payload, with its channel values inside,
is read again channel by channel when part of it is refused, so the refusal names the
channel and the other values are read.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import ormsgpack
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.event_hooks import SerdeEvent, register_serde_event_listener

from statekeeper._storage.payload import loads, safe_serde
from statekeeper.checkpointers.base import TaskWrite
from statekeeper.errors import SerializationError

__all__ = ["GuardedSerde", "Refused", "refusals_in", "refused_types"]

# serde events that mean "an object named in the bytes was not rebuilt": the value read
# is not the value stored, so passing it on would store it altered
_REFUSALS = ("msgpack_blocked", "msgpack_method_blocked")
_OPTIONS = ormsgpack.OPT_NON_STR_KEYS
_SAFE_TYPES = ("null", "bytes", "bytearray", "msgpack")


class Refused:
    """What a refused payload reads as: says why, holds nothing of it."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"Refused({self.reason!r})"


class _Constructor(Exception):
    """A JSON payload holds a constructor envelope (its dotted name is the message)."""


class GuardedSerde(SerializerProtocol):
    """Reads with the allow-list described in the module docstring; writes as
    statekeeper's serde does (msgpack, never pickle)."""

    def __init__(self) -> None:
        self._safe = safe_serde()

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if isinstance(obj, Refused):  # never stored: a transfer leaves refused threads out
            raise SerializationError(f"a refused value cannot be stored ({obj.reason})")
        return self._safe.dumps_typed(obj)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        type_, raw = data
        if type_ == "pickle":
            return Refused("a pickle payload, which is never unpickled")
        if type_ == "json":
            return _json(raw)
        if type_ not in _SAFE_TYPES:
            return Refused(f"a payload of type {type_!r}, which statekeeper does not read")
        value = self._read(type_, raw)
        if isinstance(value, Refused) and type_ == "msgpack":
            return self._checkpoint_by_channel(raw) or value
        return value

    def _read(self, type_: str, raw: bytes) -> Any:
        try:
            with refused_types() as refused:
                value = loads(self._safe, type_, raw)
        except SerializationError as exc:
            return Refused(str(exc))
        if refused:
            return Refused(
                f"it names {', '.join(dict.fromkeys(refused))}, which is not a data class "
                "of a module already imported, so it is not rebuilt (import the module "
                "that defines it first)"
            )
        return value

    def _checkpoint_by_channel(self, raw: bytes) -> dict[str, Any] | None:
        """``raw`` read as a checkpoint whose channel values are read one by one (each
        refused one a :class:`Refused`), or ``None`` when it is not a checkpoint."""
        try:
            outline = ormsgpack.unpackb(raw, ext_hook=ormsgpack.Ext, option=_OPTIONS)
        except (ValueError, TypeError):
            return None
        values = outline.get("channel_values") if isinstance(outline, dict) else None
        if not isinstance(values, dict) or "channel_versions" not in outline:
            return None
        read: dict[str, Any] = {}
        for key, part in outline.items():
            if key == "channel_values":
                continue
            read[key] = self._read("msgpack", ormsgpack.packb(part, option=_OPTIONS))
            if isinstance(read[key], Refused):
                return None  # the checkpoint's own fields: refuse it whole
        read["channel_values"] = {
            channel: self._read("msgpack", ormsgpack.packb(value, option=_OPTIONS))
            for channel, value in values.items()
        }
        return read


def _json(raw: bytes) -> Any:
    """A ``"json"`` payload as plain data; a constructor envelope in it refuses it."""
    try:
        return json.loads(raw, object_hook=_plain_object)
    except _Constructor as exc:
        return Refused(
            f"a JSON constructor of {exc} (LangGraph's older JSON format), which is never "
            "revived: reviving one imports and calls what it names"
        )
    except (ValueError, RecursionError) as exc:
        return Refused(f"a JSON payload that cannot be read ({exc})")


def _plain_object(obj: dict[str, Any]) -> dict[str, Any]:
    if "lc" in obj and obj.get("type") in ("constructor", "secret", "not_implemented"):
        name = obj.get("id")
        raise _Constructor(".".join(map(str, name)) if isinstance(name, list) else repr(name))
    return obj


def refusals_in(
    tup: CheckpointTuple, writes: Sequence[TaskWrite]
) -> Iterator[tuple[str | None, str]]:
    """``(channel, reason)`` for each :class:`Refused` in the checkpoint ``tup`` read and
    its ``writes``; channel ``None``: the whole checkpoint."""
    checkpoint: Any = tup.checkpoint  # typed a Checkpoint; here it may be a Refused
    if isinstance(checkpoint, Refused):
        yield None, checkpoint.reason
    else:
        for channel, value in checkpoint.get("channel_values", {}).items():
            if isinstance(value, Refused):
                yield f"channel {channel!r}", value.reason
    for write in writes:
        if isinstance(write.value, Refused):
            yield f"write to {write.channel!r} by task {write.task_id!r}", write.value.reason


@contextlib.contextmanager
def refused_types() -> Iterator[list[str]]:
    """Collect, while the block runs in this thread, the names of objects the serde
    refused to rebuild (it returns their raw data instead)."""
    refused: list[str] = []
    owner = threading.get_ident()

    def listen(event: SerdeEvent) -> None:
        if event["kind"] in _REFUSALS and threading.get_ident() == owner:
            name = ".".join(filter(None, (event["module"], event["name"], event.get("method"))))
            refused.append(name)

    unregister = register_serde_event_listener(listen)
    try:
        yield refused
    finally:
        unregister()

"""The dump format: JSON Lines, one checkpoint per line (documented in docs/dump-format.md).

:class:`DumpWriter` writes records; :func:`read_dump` reads them back and validates every
line as it goes (with the checks of :mod:`._checks`, plus the header, the payloads and
the trailer's counts and checksum here), so a caller that reads a dump to the end before
writing anything knows it is whole and well formed. Payloads are decoded with
:func:`safe_serde` only: nothing in a dump can import a module or call anything but a
data class from a module already imported, and a value that would not be rebuilt exactly
is refused rather than altered.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import hashlib
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata

from statekeeper._storage.payload import check_id, dumps, ensure_exact, loads, safe_serde
from statekeeper.checkpointers.base import TaskWrite
from statekeeper.errors import (
    ConfigurationError,
    InvalidIdError,
    SerializationError,
    StatekeeperError,
)
from statekeeper.transfer._checks import (
    Invalid,
    ThreadHistory,
    channel_versions,
    check_keys,
    check_text,
    checkpoint_fields,
    decoded,
    json_object,
    parse,
)
from statekeeper.transfer.records import Record, refused_types, write_calls

__all__ = ["FORMAT", "MAX_ID_CHARS", "VERSION", "Contents", "DumpWriter", "read_dump"]

FORMAT = "statekeeper-dump"
VERSION = 1
MAX_ID_CHARS = 65_536  # ids longer than this are refused: no real id is, a hostile one may be
_PAYLOAD_TYPES = ("null", "bytes", "bytearray", "msgpack")  # what safe_serde's dumps_typed makes
_HEADER = {"format", "version", "created_at"}
_RECORD = {
    "kind",
    "thread_id",
    "checkpoint_ns",
    "checkpoint_id",
    "parent_id",
    "checkpoint",
    "metadata",
    "new_versions",
    "values",
    "writes",
}
_WRITE = {"task_id", "task_path", "channel", "value"}
_TRAILER = {"kind", "threads", "checkpoints", "writes", "sha256"}
_MAX_JSON_DEPTH = 100  # checkpoint fields and metadata (LangGraph's are a few levels deep)


def checked_id(value: object, what: str, *, allow_empty: bool = False) -> str:
    """:func:`check_id` for text only (a dump keeps ``7`` and ``"7"`` apart), plus the
    dump's length limit (:data:`MAX_ID_CHARS`)."""
    if not isinstance(value, str):
        raise InvalidIdError(f"{what} must be text, got {type(value).__name__}")
    text = check_id(value, what, allow_empty=allow_empty)
    if len(text) > MAX_ID_CHARS:
        raise InvalidIdError(
            f"{what} is {len(text)} characters long; a dump holds ids of at most "
            f"{MAX_ID_CHARS} characters"
        )
    return text


def _digest_line(digest: Any, line: str) -> None:
    """Hash a line as written, whatever newline translation the file went through."""
    body = line.removesuffix("\n").removesuffix("\r")
    digest.update(body.encode("utf-8", "surrogatepass") + b"\n")


# -- writing ----------------------------------------------------------------------------


class DumpWriter:
    """Writes a dump to ``out``: :meth:`header`, one :meth:`record` per checkpoint (a
    thread's records together, parents first), then :meth:`trailer`."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._digest = hashlib.sha256()
        self._threads: set[str] = set()
        self._checkpoints = 0
        self._writes = 0
        self._serde = safe_serde()

    def header(self) -> None:
        now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        self._line({"format": FORMAT, "version": VERSION, "created_at": now})

    def record(self, record: Record) -> None:
        """Write one checkpoint.

        Raises:
            SerializationError: a value cannot be encoded exactly, or the checkpoint or
                its metadata is not plain JSON (a tuple, NaN, a datetime...).
            InvalidIdError: an id is longer than :data:`MAX_ID_CHARS`.
        """
        checkpoint = {
            key: value
            for key, value in record.checkpoint.items()
            if key not in ("id", "channel_values")
        }
        line = {
            "kind": "checkpoint",
            "thread_id": checked_id(record.thread_id, "thread_id"),
            "checkpoint_ns": checked_id(record.checkpoint_ns, "checkpoint_ns", allow_empty=True),
            "checkpoint_id": checked_id(record.checkpoint_id, "checkpoint_id"),
            "parent_id": None
            if record.parent_id is None
            else checked_id(record.parent_id, "parent_id"),
            "checkpoint": _plain(checkpoint, "the checkpoint"),
            "metadata": _plain(record.metadata, "the metadata"),
            "new_versions": record.new_versions,
            "values": {
                channel: self._payload(value)
                for channel, value in record.checkpoint["channel_values"].items()
            },
            "writes": [
                {
                    "task_id": checked_id(w.task_id, "task_id", allow_empty=True),
                    "task_path": checked_id(w.task_path, "task_path", allow_empty=True),
                    "channel": w.channel,
                    "value": self._payload(w.value),
                }
                for w in record.writes
            ],
        }
        self._line(line)
        self._threads.add(record.thread_id)
        self._checkpoints += 1
        self._writes += len(record.writes)

    def trailer(self) -> None:
        self._line(
            {
                "kind": "end",
                "threads": len(self._threads),
                "checkpoints": self._checkpoints,
                "writes": self._writes,
                "sha256": self._digest.hexdigest(),
            },
            hashed=False,
        )

    def _payload(self, value: Any) -> dict[str, str]:
        type_, data = dumps(self._serde, value)
        ensure_exact(value, type_, data)
        return {"type": type_, "data": base64.b64encode(data).decode("ascii")}

    def _line(self, obj: Mapping[str, Any], *, hashed: bool = True) -> None:
        line = json.dumps(obj, ensure_ascii=True, allow_nan=False, separators=(",", ":")) + "\n"
        if hashed:
            _digest_line(self._digest, line)
        self._out.write(line)


def _plain(value: Any, what: str, depth: int = 0) -> Any:
    """``value`` if JSON keeps it exactly (dicts with text keys, lists, text, finite
    numbers, booleans, None), else :class:`SerializationError` naming where it is not."""
    if depth > _MAX_JSON_DEPTH:
        raise SerializationError(
            f"{what} is nested too deeply: a dump holds checkpoints and metadata nested at "
            f"most {_MAX_JSON_DEPTH} levels deep"
        )
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise SerializationError(f"{what} has a non-text key {key!r}; JSON would alter it")
            _plain(item, f"{what}[{key!r}]", depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _plain(item, f"{what}[{index}]", depth + 1)
    elif isinstance(value, float) and not math.isfinite(value):
        raise SerializationError(f"{what} is {value!r}, which JSON cannot hold")
    elif value is not None and not isinstance(value, str | int | float | bool):
        raise SerializationError(
            f"{what} is a {type(value).__name__}, which JSON would alter; checkpoints and "
            "metadata must be plain JSON to be dumped"
        )
    return value


# -- reading ----------------------------------------------------------------------------


@dataclass
class Contents:
    """What a dump holds, filled in while :func:`read_dump` reads it."""

    checkpoints: dict[str, int] = field(default_factory=dict)  # per thread, in dump order
    writes: int = 0


def read_dump(lines: Iterable[str], contents: Contents | None = None) -> Iterator[Record]:
    """The records of a dump, each validated before it is yielded; the header first, the
    trailer (counts and checksum) after the last record.

    Raises:
        SerializationError: the dump is malformed, truncated, altered, hostile or not
            UTF-8 text; the message names the line and what is wrong with it.
        ConfigurationError: ``lines`` are bytes: the dump was opened in binary mode.
    """
    reader = _Reader(Contents() if contents is None else contents)
    number = 0
    for number, line in enumerate(decoded(lines), 1):
        if not isinstance(line, str):
            raise ConfigurationError("open the dump in text mode (it is UTF-8 JSON Lines)")
        try:
            check_text(line)
            record = reader.line(number, line)
        except Invalid as exc:
            raise SerializationError(f"dump line {number}: {exc}") from None
        except StatekeeperError as exc:
            raise SerializationError(f"dump line {number}: {exc}") from exc
        if record is not None:
            yield record
    if number == 0:
        raise SerializationError("the dump is empty: it has no header line")
    if reader.trailer_line is None:
        raise SerializationError(
            f"the dump ends at line {number} without its trailer: it is truncated"
        )


class _Reader:
    def __init__(self, contents: Contents) -> None:
        self.contents = contents
        self.digest = hashlib.sha256()
        self.thread: ThreadHistory | None = None
        self.trailer_line: int | None = None
        self.serde = safe_serde()

    def line(self, number: int, line: str) -> Record | None:
        if self.trailer_line is not None:
            raise Invalid(f"data after the trailer (line {self.trailer_line})")
        obj = parse(line)
        record = None
        if number == 1:
            _check_header(obj)
        elif obj.get("kind") == "checkpoint":
            record = self.record(number, obj)
        elif obj.get("kind") == "end":
            self.trailer(obj)
            self.trailer_line = number
            return None
        else:
            raise Invalid(f"unknown record kind {obj.get('kind')!r}")
        _digest_line(self.digest, line)
        return record

    def record(self, number: int, obj: dict[str, Any]) -> Record:
        check_keys(obj, _RECORD, "a checkpoint record")
        thread_id = checked_id(obj["thread_id"], "thread_id")
        ns = checked_id(obj["checkpoint_ns"], "checkpoint_ns", allow_empty=True)
        checkpoint_id = checked_id(obj["checkpoint_id"], "checkpoint_id")
        parent_id = obj["parent_id"]
        if parent_id is not None:
            parent_id = checked_id(parent_id, "parent_id")
        # nested no deeper than an export writes (a write of deeper metadata could fail
        # with a RecursionError halfway through the import)
        fields = checkpoint_fields(_plain(obj["checkpoint"], "checkpoint"))
        changed = channel_versions(obj["new_versions"], "new_versions")
        thread = self.enter(thread_id)
        thread.place(number, (ns, checkpoint_id), parent_id, fields["channel_versions"], changed)
        values = {
            checked_id(channel, "channel name", allow_empty=True): self.payload(
                payload, f"the value of channel {channel!r}"
            )
            for channel, payload in json_object(obj["values"], "values").items()
        }
        if stray := [channel for channel in values if channel not in changed]:
            raise Invalid(f"values has channels not in new_versions: {stray!r}")
        writes = self.writes(obj["writes"])
        counts = self.contents.checkpoints
        counts[thread_id] = counts.get(thread_id, 0) + 1
        self.contents.writes += len(writes)
        checkpoint: Checkpoint = {**fields, "id": checkpoint_id, "channel_values": values}  # type: ignore[typeddict-item]
        plain_metadata = json_object(_plain(obj["metadata"], "metadata"), "metadata")
        metadata: CheckpointMetadata = plain_metadata  # type: ignore[assignment]
        return Record(thread_id, ns, parent_id, checkpoint, metadata, changed, writes)

    def enter(self, thread_id: str) -> ThreadHistory:
        """The state of ``thread_id``; a thread's records must not be split up."""
        if self.thread is None or self.thread.thread_id != thread_id:
            if thread_id in self.contents.checkpoints:
                raise Invalid(
                    f"the records of thread {thread_id!r} are not all together; a dump "
                    "holds each thread's records in one run"
                )
            self.thread = ThreadHistory(thread_id)
        return self.thread

    def writes(self, value: Any) -> list[TaskWrite]:
        if not isinstance(value, list):
            raise Invalid("writes must be a list")
        writes = []
        for index, item in enumerate(value):
            check_keys(json_object(item, f"writes[{index}]"), _WRITE, f"writes[{index}]")
            writes.append(
                TaskWrite(
                    checked_id(item["task_id"], "task_id", allow_empty=True),
                    checked_id(item["task_path"], "task_path", allow_empty=True),
                    checked_id(item["channel"], "channel name", allow_empty=True),
                    self.payload(item["value"], f"the value of writes[{index}]"),
                )
            )
        for _ in write_calls(writes):  # refuses writes that could not be stored again
            pass
        return writes

    def payload(self, value: Any, what: str) -> Any:
        payload = json_object(value, what)
        check_keys(payload, {"type", "data"}, what)
        type_, data = payload["type"], payload["data"]
        if type_ not in _PAYLOAD_TYPES:
            raise Invalid(
                f"{what} has payload type {type_!r}; a dump holds only {', '.join(_PAYLOAD_TYPES)}"
            )
        if not isinstance(data, str):
            raise Invalid(f"{what}: data must be base64 text")
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise Invalid(f"{what}: data is not valid base64 ({exc})") from None
        with refused_types() as refused:
            decoded = loads(self.serde, type_, raw)
        if refused:
            raise Invalid(
                f"{what} names {', '.join(refused)}, which is not a data class of a module "
                "already imported, so it is not rebuilt (a dump never imports or calls "
                "anything else); import the module that defines your state types first"
            )
        return decoded

    def trailer(self, obj: dict[str, Any]) -> None:
        check_keys(obj, _TRAILER, "the trailer")
        found = {
            "threads": len(self.contents.checkpoints),
            "checkpoints": sum(self.contents.checkpoints.values()),
            "writes": self.contents.writes,
        }
        for name, count in found.items():
            claimed = obj[name]
            if not isinstance(claimed, int) or isinstance(claimed, bool) or claimed != count:
                raise Invalid(
                    f"the trailer counts {claimed!r} {name} but the dump holds {count}: "
                    "records are missing or were added"
                )
        if obj["sha256"] != self.digest.hexdigest():
            raise Invalid("the checksum does not match the records: the dump was altered")


def _check_header(obj: dict[str, Any]) -> None:
    if obj.get("format") != FORMAT:
        raise Invalid(f'not a statekeeper dump: the first line must be {{"format": "{FORMAT}"...}}')
    version = obj.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version > VERSION:
        raise Invalid(
            f"dump format version {version} is newer than this statekeeper reads "
            f"(up to {VERSION}); upgrade statekeeper"
        )
    if version != VERSION or isinstance(version, bool):
        raise Invalid(f"unknown dump format version {version!r}; this statekeeper reads {VERSION}")
    check_keys(obj, _HEADER, "the header")

"""One (thread, namespace) of the file checkpointer: its folder and the files in it.

::

    <namespace>/checkpoints              one line per checkpoint, with its small values
    <namespace>/writes                   one line per put_writes call (see _log.lines)
    <namespace>/checkpoints.head         how far each log's committed lines reach (_log.head)
    <namespace>/writes.head
    <namespace>/values/<channel>@<ver>   a record: one large channel value at one version

Reading returns payloads as ``(type, codec, bytes)``; decoding them with the saver's serde
is the backend's business. Every reader checks that a record's own ids match the file it
was found in (so a shortened name's hash collision, or a misplaced file, is damage).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import json
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import writes_sort_key

from statekeeper._storage.files import (
    RecordError,
    pack_record,
    read_bytes,
    replace_file,
    storage_error,
    sync_dir,
    unpack_record,
)
from statekeeper.backends.file._layout import decode_name, value_file_name
from statekeeper.backends.file._log import write as _log
from statekeeper.backends.file._log.head import head_path, read_head
from statekeeper.backends.file._log.lines import (
    CHECKPOINTS,
    RECORDS,
    WRITES,
    DamagedIndex,
    Entry,
    make_entry,
)
from statekeeper.backends.file._log.manifest import listed
from statekeeper.backends.file._log.view import IndexView, Lost
from statekeeper.errors import CorruptCheckpointError, Damage

__all__ = [
    "SUBDIRS",
    "Damaged",
    "Missing",
    "Namespace",
    "Payload",
    "WriteRow",
    "corrupt_error",
    "has_lines",
    "names_in",
    "read_record",
    "record_names",
    "reporting",
    "short",
]

SUBDIRS = ("values",)
Payload = tuple[str, str, bytes]  # (type, codec, bytes), as _storage.payload.encode returns
WriteRow = tuple[Any, ...]  # (task_id, idx, channel, task_path, type, codec, bytes)
Meta = dict[str, Any]


class Missing(FileNotFoundError):
    """Something a checkpoint needs is not there: ``args[0]`` is the path, ``reason`` says
    what is missing (a file, or the line that holds a value), ``record`` its kind."""

    def __init__(
        self, path: Path | str, reason: str = "the file is missing", record: str = "value"
    ) -> None:
        super().__init__(str(path))
        self.reason = reason
        self.record = record


class Damaged(Exception):
    """A stored file is not intact: ``path``, a human ``reason``, and the kind of record
    at fault (``record``, as in :class:`~statekeeper.errors.Damage`)."""

    def __init__(self, path: Path | str, reason: str, record: str = "value") -> None:
        super().__init__(f"{path}: {reason}")
        self.path = Path(path)
        self.reason = reason
        self.record = record


def read_record(path: Path, kind: str) -> tuple[Meta, list[bytes]]:
    """The record at ``path``, checked.

    Raises:
        FileNotFoundError: there is no such file (its path is ``args[0]``).
        Damaged: it is truncated, altered, or not a ``kind`` record.
        StorageError: it cannot be read.
    """
    try:
        data = read_bytes(path)
    except (FileNotFoundError, NotADirectoryError):
        raise FileNotFoundError(str(path)) from None
    except OSError as exc:
        raise storage_error(exc, "read", path) from exc
    try:
        meta, blobs = unpack_record(data)
    except RecordError as exc:
        raise Damaged(path, str(exc)) from None
    if meta.get("kind") != kind:
        raise Damaged(path, f"holds a {meta.get('kind')!r} record, not a {kind!r} one")
    return meta, blobs


def short(text: str | None) -> str:
    """``repr`` of an id, shortened for messages (ids can be 10,000 characters long)."""
    shown = repr(text)
    return shown if len(shown) <= 80 else f"{shown[:77]}...'"


def corrupt_error(
    n: Namespace, checkpoint_id: str | None, path: Path | str, reason: str, record: str | None
) -> CorruptCheckpointError:
    """The error for damage met in ``n``, naming the thread, checkpoint, file and the kind
    of record at fault."""
    which = f"checkpoint {short(checkpoint_id)}" if checkpoint_id else "a checkpoint"
    return CorruptCheckpointError(
        f"{which} of thread {short(n.thread_id)} (namespace {short(n.ns)}) is damaged: "
        f"{path}: {reason}; run verify(quarantine=True) to move damaged files aside, or "
        "open with on_corrupt='fallback' to use the newest intact checkpoint",
        Damage(
            reason,
            backend="file",
            thread_id=n.thread_id,
            checkpoint_ns=n.ns,
            checkpoint_id=checkpoint_id,
            record=record,
            path=str(path),
        ),
    )


@contextlib.contextmanager
def reporting(n: Namespace, checkpoint_id: str | None = None) -> Iterator[None]:
    """Turn damage (or a missing file) met in the block into CorruptCheckpointError."""
    try:
        yield
    except Damaged as damage:
        raise corrupt_error(n, checkpoint_id, damage.path, damage.reason, damage.record) from None
    except DamagedIndex as damage:
        raise corrupt_error(n, checkpoint_id, n.index, str(damage), damage.record) from None
    except FileNotFoundError as missing:
        reason = getattr(missing, "reason", "the file is missing")
        record = getattr(missing, "record", "value")
        raise corrupt_error(n, checkpoint_id, str(missing), reason, record) from None


def names_in(folder: Path) -> Iterator[str]:
    """Entries of ``folder`` that can be ours (not temporary or hidden), sorted."""
    try:
        names = sorted(os.listdir(folder))  # noqa: PTH208 - names, not Path objects
    except (FileNotFoundError, NotADirectoryError):
        return iter(())
    return (name for name in names if not name.startswith("."))


_SHORTENED = re.compile(r"[a-z0-9._~^-]*~~[0-9a-f]{64}")


def _is_file_name(name: str) -> bool:
    """Whether ``name`` can be ``file_name`` of some text (in full or shortened)."""
    if _SHORTENED.fullmatch(name) and name.count("~~") == 1:
        return True
    try:
        decode_name(name)
    except ValueError:
        return False
    return True


def _is_value_name(name: str) -> bool:
    """Whether ``name`` can be ``value_file_name`` of some channel and version."""
    channel, at, version = name.partition("@")
    if not at or not _is_file_name(channel):
        return False
    if not version.startswith("="):
        return _is_file_name(version)
    try:
        return not isinstance(json.loads(version[1:]), str)
    except ValueError:
        return False


def record_names(folder: Path) -> Iterator[str]:
    """The entries of a ``values`` folder whose names a value file can have; anything else
    (a ``README`` a user put there) is not ours and is left alone."""
    return (name for name in names_in(folder) if _is_value_name(name))


@dataclass(frozen=True)
class Namespace:
    """One (thread, namespace) and its folder; ``durable`` says whether writes are
    flushed to disk before they count (the checkpointer's ``fsync`` option), ``heads``
    whether its logs have heads to be checked against (a directory in format 3)."""

    thread_id: str
    ns: str
    dir: Path
    durable: bool = True
    heads: bool = True

    @functools.cached_property
    def index(self) -> Path:
        return self.dir / CHECKPOINTS

    @functools.cached_property
    def writes_log(self) -> Path:
        return self.dir / WRITES

    @functools.cached_property
    def values_dir(self) -> Path:
        return self.dir / "values"

    def value_path(self, channel: str, version: Any) -> Path:
        return self.values_dir / value_file_name(channel, version)

    def entries(self) -> list[Entry]:
        """Every line of ``checkpoints`` (deleted ones' too), oldest first; ``[]`` if none.

        Raises:
            DamagedIndex: a line is damaged or lost (a rewrite must not drop it).
        """
        try:
            with IndexView(self.index, heads=self.heads) as view:
                return view.all(strict=True)
        except (FileNotFoundError, NotADirectoryError):
            if (lost := self.missing(CHECKPOINTS)) is not None:
                raise lost.damage from None
            return []

    def write_entries(self) -> list[Entry]:
        """Every line of ``writes``, in file order; ``[]`` if there is none.

        Raises:
            Damaged: a line is damaged or lost (a rewrite must not drop it).
        """
        try:
            with IndexView(self.writes_log, kind=WRITES, heads=self.heads) as view:
                return view.all(strict=True)
        except (FileNotFoundError, NotADirectoryError):
            if (lost := self.missing(WRITES)) is not None:
                raise Damaged(self.writes_log, str(lost.damage), "writes") from None
            return []
        except DamagedIndex as damage:
            raise Damaged(self.writes_log, str(damage), damage.record) from None

    def missing(self, kind: str) -> Lost | None:
        """Why it is damage that the log ``kind`` of this namespace is missing: its head
        says lines were committed to it, or (``checkpoints``) its ``writes`` log has
        lines, or (``writes``) its ``checkpoints`` log exists, or the thread's manifest
        lists the namespace. None when nothing was committed to it (it was never
        created, creating it was interrupted, or the thread was deleted meanwhile).

        Raises:
            DamagedIndex: the manifest is damaged (when it had to be read).
        """
        log = self.dir / kind
        record = RECORDS[kind]
        if self.heads and (lost := _missing_by_head(log, kind)) is not None:
            return lost
        other = self.index if kind == WRITES else self.writes_log
        if kind == WRITES and other.exists():
            reason = f"its {kind} log is missing while its checkpoints log is there"
            return Lost(DamagedIndex(reason, record=record))
        if kind == CHECKPOINTS and has_lines(other, WRITES):
            reason = "its checkpoints log is missing while its writes log has lines"
            return Lost(DamagedIndex(reason, record=record))
        if self.heads and self.ns in listed(self.dir.parent, self.thread_id):
            reason = (
                f"the thread's manifest lists namespace {self.ns!r}, but its {kind} log is missing"
            )
            return Lost(DamagedIndex(reason, record=record))
        return None

    # -- reading -----------------------------------------------------------------------

    def checkpoint_payload(self, entry: Entry) -> Payload:
        """The serialised checkpoint (without its values) that ``entry``'s line holds."""
        try:
            body = base64.b64decode(entry.record["checkpoint"], validate=True)
            return entry.record["type"], entry.record["codec"], body
        except (KeyError, TypeError, binascii.Error) as exc:
            reason = f"malformed line of checkpoint {entry.checkpoint_id!r} ({exc!r})"
            raise Damaged(self.index, reason, "checkpoint") from None

    def _writes_view(self, *, writable: bool = False) -> IndexView:
        # Damage in another checkpoint's lines is verify()'s to report; lines_of raises
        # for damage that is, or may be, this checkpoint's.
        return IndexView(
            self.writes_log, lambda _: None, writable=writable, kind=WRITES, heads=self.heads
        )

    def write_rows(self, checkpoint_id: str, view: IndexView | None = None) -> list[WriteRow]:
        """A checkpoint's pending writes as ``(task_id, idx, channel, task_path, type,
        codec, bytes)`` in ``writes_sort_key`` order; ``[]`` when it has none. Of several
        lines for one (task, index), a regular write keeps the first, a special channel
        (negative index) the last.

        Raises:
            Damaged: a line of this checkpoint (or one whose id cannot be read) is damaged.
        """
        try:
            if view is None:
                with self._writes_view() as opened:
                    lines = opened.lines_of(checkpoint_id)
            else:
                lines = view.lines_of(checkpoint_id)
        except (FileNotFoundError, NotADirectoryError):
            lost = self.missing(WRITES)
            if lost is not None and lost.covers(checkpoint_id):
                raise Damaged(self.writes_log, str(lost.damage), "writes") from None
            return []
        except DamagedIndex as damage:
            raise Damaged(self.writes_log, str(damage), damage.record) from None
        merged: dict[tuple[str, int], WriteRow] = {}
        try:
            for line in lines:
                record = line.record
                for idx, channel, type_, codec, data in record["writes"]:
                    key = (record["task_id"], idx)
                    if idx < 0 or key not in merged:
                        blob = base64.b64decode(data, validate=True)
                        merged[key] = (*key, channel, record["task_path"], type_, codec, blob)
        except (KeyError, TypeError, ValueError, binascii.Error) as exc:
            reason = f"malformed writes line of checkpoint {checkpoint_id!r} ({exc!r})"
            raise Damaged(self.writes_log, reason, "writes") from None
        return sorted(merged.values(), key=lambda r: writes_sort_key(r[3], r[0], r[1]))

    # -- writing (the caller holds the thread's lock) -----------------------------------

    def merge_writes(self, checkpoint_id: str, rows: Sequence[WriteRow]) -> None:
        """Add one task's write rows to a checkpoint's writes, as one appended line: a
        regular write already stored for (task, index) is kept; special channels
        (negative index) are replaced. Writes nothing when nothing changes.

        Raises:
            Damaged: the checkpoint's stored writes are damaged (never overwritten).
        """
        with self._writes_view(writable=True) as view:
            merged = {(r[0], r[1]): r for r in self.write_rows(checkpoint_id, view)}
            new: dict[tuple[str, int], WriteRow] = {}
            for row in rows:
                key = (row[0], row[1])
                if (row[1] >= 0 and (key in merged or key in new)) or merged.get(key) == row:
                    continue
                new[key] = row
            if not new:
                return
            task_id, task_path = rows[0][0], rows[0][3]
            entry = make_entry(
                {
                    "checkpoint_id": checkpoint_id,
                    "task_id": task_id,
                    "task_path": task_path,
                    "writes": [
                        [idx, channel, type_, codec, base64.b64encode(blob).decode("ascii")]
                        for _, idx, channel, _, type_, codec, blob in new.values()
                    ],
                }
            )
            try:
                _log.commit(view, entry, self.thread_id, self.ns, durable=self.durable)
            except DamagedIndex as damage:
                raise Damaged(self.writes_log, str(damage), damage.record) from None
            except OSError as exc:
                raise storage_error(exc, "update", self.writes_log) from exc

    def write(self, path: Path, meta: Meta, blobs: Sequence[bytes]) -> None:
        """Atomically (re)write the record at ``path``; :meth:`sync` its folder after."""
        data = pack_record(meta, blobs)
        try:
            replace_file(path, data, durable=self.durable)
        except OSError as exc:
            raise storage_error(exc, "write", path) from exc

    def sync(self, folder: Path) -> None:
        """Make the renames in ``folder`` durable (when ``durable``)."""
        if self.durable:
            try:
                sync_dir(folder)
            except OSError as exc:
                raise storage_error(exc, "flush the directory", folder) from exc


def _missing_by_head(log: Path, kind: str) -> Lost | None:
    """Lost lines of the missing log at ``log`` that its head tells of."""
    path = head_path(log)
    try:
        fd = os.open(path, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        head = read_head(fd, path, kind)
    except DamagedIndex as damage:
        return Lost(damage)
    finally:
        os.close(fd)
    if head.lines == 0:
        return None  # created, nothing committed (an interrupted namespace creation)
    reason = (
        f"its {kind} log is missing, but its head says {head.lines} lines (the last of "
        f"checkpoint {head.newest!r}) were committed"
    )
    return Lost(DamagedIndex(reason, head.newest, RECORDS[kind]), None, head.newest)


def has_lines(log: Path, kind: str) -> bool:
    """Whether the log at ``log`` has a line (intact or not), or cannot be read at all."""
    try:
        with IndexView(log, lambda _: None, kind=kind) as view:
            return view.valid_end > view.data_start
    except (FileNotFoundError, NotADirectoryError):
        return False
    except DamagedIndex:
        return True

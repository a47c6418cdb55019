"""One (thread, namespace) of the file checkpointer: its folder and the files in it.

::

    <namespace>/checkpoints              one line per checkpoint, with its small values
    <namespace>/writes                   one line per put_writes call (see _file_index)
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
from statekeeper.backends.file import _index as _file_index
from statekeeper.backends.file._index import (
    CHECKPOINTS,
    WRITES,
    DamagedIndex,
    Entry,
    IndexView,
    make_entry,
)
from statekeeper.backends.file._layout import decode_name, value_file_name
from statekeeper.errors import CorruptCheckpointError, Damage

__all__ = [
    "SUBDIRS",
    "Damaged",
    "Missing",
    "Namespace",
    "Payload",
    "WriteRow",
    "corrupt_error",
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
    what is missing (a file, or the line that holds a value)."""

    def __init__(self, path: Path | str, reason: str = "the file is missing") -> None:
        super().__init__(str(path))
        self.reason = reason


class Damaged(Exception):
    """A stored file is not intact: ``path`` and a human ``reason``."""

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = Path(path)
        self.reason = reason


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
    n: Namespace, checkpoint_id: str | None, path: Path | str, reason: str
) -> CorruptCheckpointError:
    """The error for damage met in ``n``, naming the thread, checkpoint and file."""
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
            path=str(path),
        ),
    )


@contextlib.contextmanager
def reporting(n: Namespace, checkpoint_id: str | None = None) -> Iterator[None]:
    """Turn damage (or a missing file) met in the block into CorruptCheckpointError."""
    try:
        yield
    except Damaged as damage:
        raise corrupt_error(n, checkpoint_id, damage.path, damage.reason) from None
    except DamagedIndex as damage:
        raise corrupt_error(n, checkpoint_id, n.index, str(damage)) from None
    except FileNotFoundError as missing:
        reason = getattr(missing, "reason", "the file is missing")
        raise corrupt_error(n, checkpoint_id, str(missing), reason) from None


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
    flushed to disk before they count (the checkpointer's ``fsync`` option)."""

    thread_id: str
    ns: str
    dir: Path
    durable: bool = True

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
            DamagedIndex: a line is damaged (a rewrite must not drop it).
        """
        try:
            with IndexView(self.index) as view:
                return view.all(strict=True)
        except (FileNotFoundError, NotADirectoryError):
            return []

    def write_entries(self) -> list[Entry]:
        """Every line of ``writes``, in file order; ``[]`` if there is none.

        Raises:
            Damaged: a line is damaged (a rewrite must not drop it).
        """
        try:
            with IndexView(self.writes_log, kind=WRITES) as view:
                return view.all(strict=True)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except DamagedIndex as damage:
            raise Damaged(self.writes_log, str(damage)) from None

    # -- reading -----------------------------------------------------------------------

    def checkpoint_payload(self, entry: Entry) -> Payload:
        """The serialised checkpoint (without its values) that ``entry``'s line holds."""
        try:
            body = base64.b64decode(entry.record["checkpoint"], validate=True)
            return entry.record["type"], entry.record["codec"], body
        except (KeyError, TypeError, binascii.Error) as exc:
            reason = f"malformed line of checkpoint {entry.checkpoint_id!r} ({exc!r})"
            raise Damaged(self.index, reason) from None

    def _writes_view(self, *, writable: bool = False) -> IndexView:
        # Damage in another checkpoint's lines is verify()'s to report; lines_of raises
        # for damage that is, or may be, this checkpoint's.
        return IndexView(self.writes_log, lambda _: None, writable=writable, kind=WRITES)

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
            return []
        except DamagedIndex as damage:
            raise Damaged(self.writes_log, str(damage)) from None
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
            raise Damaged(self.writes_log, reason) from None
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
                _file_index.commit(view, entry, self.thread_id, self.ns, durable=self.durable)
            except DamagedIndex as damage:
                raise Damaged(self.writes_log, str(damage)) from None
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

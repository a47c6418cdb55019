"""Writing a log: new logs, the append that commits a line, and atomic rewrites — each
keeping the log's head (:mod:`.head`) in step.

* :func:`create` writes the head of an empty log, then the log (header only): a head
  without its log says nothing was committed, so a crash in between loses nothing.
* :meth:`IndexView.append` (the common write) appends and flushes the line, then moves
  the head past it, in place and without a flush of its own.
* :func:`rewrite` (an id below the last one, a replaced checkpoint, a deletion, a repair)
  writes the whole log anew under the next generation, flushes and renames it into
  place, then writes its head whole.
"""

from __future__ import annotations

import bisect
import contextlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from statekeeper._storage.files import replace_file, sync_dir
from statekeeper.backends.file._log.head import Head, head_path, initial_head, kept, read_head
from statekeeper.backends.file._log.lines import (
    CHECKPOINTS,
    ID_HEAD,
    WRITES,
    DamagedIndex,
    Entry,
    header_line,
    id_in,
    json_start,
    line,
)
from statekeeper.backends.file._log.view import IndexView

__all__ = ["appends", "commit", "create", "head_for", "rewrite"]


def create(path: Path, kind: str, thread_id: str, ns: str, *, durable: bool) -> None:
    """Write an empty log (header only) and its head, atomically each, the head first;
    the caller syncs the directory."""
    header = header_line(kind, thread_id, ns, 1)
    head = Head(0, 1, len(header), header[:16], 0, None, kind)
    initial_head(head_path(path), head, durable=durable)
    replace_file(path, header, durable=durable)


def appends(view: IndexView, checkpoint_id: str) -> bool:
    """Whether a line for ``checkpoint_id`` goes at the end of the log (the common case):
    a new greatest id, or, in the ``writes`` log, the greatest id again."""
    last = view.last
    if last is None or last.checkpoint_id < checkpoint_id:
        return True
    return view.kind == WRITES and last.checkpoint_id == checkpoint_id


def commit(
    view: IndexView,
    entry: Entry,
    thread_id: str,
    ns: str,
    *,
    durable: bool,
    others: Callable[[list[Entry]], list[Entry]] | None = None,
) -> None:
    """Record ``entry`` in the log ``view`` was opened (writable) on: an append in the
    common case (see :func:`appends`), otherwise an atomic rewrite, which in the
    ``checkpoints`` log replaces the line of the same id (``others``, if given, adjusts
    the other lines first, given them all with the new one).

    Raises:
        DamagedIndex: a rewrite is needed and the file holds a damaged line (rewriting
            would drop it: nothing is removed silently).
    """
    if appends(view, entry.checkpoint_id):
        view.append(entry, durable=durable)
        return
    entries = view.all(strict=True)
    if view.kind == CHECKPOINTS:
        entries = [e for e in entries if e.checkpoint_id != entry.checkpoint_id]
    bisect.insort_right(entries, entry, key=lambda e: e.checkpoint_id)
    if others is not None:
        entries = others(entries)
    rewrite(view.path, view.kind, thread_id, ns, entries, durable=durable)


def rewrite(
    path: Path, kind: str, thread_id: str, ns: str, entries: Sequence[Entry], *, durable: bool
) -> None:
    """Replace the log with exactly ``entries`` (sorted by id, the order of equal ids
    kept) under the next generation, atomically, then its head."""
    generation = _next_generation(path, kind)
    ordered = sorted(entries, key=lambda e: e.checkpoint_id)
    parts = [header_line(kind, thread_id, ns, generation)]
    for entry in ordered:
        parts.append(line(entry.raw, parts[-1][:16]))
    data = b"".join(parts)
    replace_file(path, data, durable=durable)
    if durable:
        sync_dir(path.parent)
    newest = kept(ordered[-1].checkpoint_id) if ordered else None
    head = Head(0, generation, len(data), parts[-1][:16], len(ordered), newest, kind)
    initial_head(head_path(path), head, durable=durable)


def _next_generation(path: Path, kind: str) -> int:
    """One more than the generation of the log at ``path`` and of its head (what can
    still be read of them), so a rewrite never looks like an older copy."""
    found = [0]
    with (
        contextlib.suppress(OSError, DamagedIndex),
        IndexView(path, lambda _: None, kind=kind) as view,
    ):
        generation = view.header().get("generation", 0)
        found.append(generation if isinstance(generation, int) else 0)
    with contextlib.suppress(OSError, DamagedIndex):
        fd = os.open(head_path(path), os.O_RDONLY)
        try:
            found.append(read_head(fd, head_path(path), kind).generation)
        finally:
            os.close(fd)
    return max(found) + 1


def head_for(view: IndexView) -> Head:
    """The head of the log ``view`` is open on, as it is (for an upgrade or a repair):
    every complete line counts, intact or not."""
    lines, newest = view.count(), _tail_id(view)
    return Head(0, view.generation, view.valid_end, view.tail_digest, lines, newest, view.kind)


def _tail_id(view: IndexView) -> str | None:
    """The checkpoint id of the last complete line, intact or not, when it can be read
    and a head can keep it (see :func:`.head.kept`)."""
    if view.valid_end <= view.data_start:
        return None
    start = view.line_start_before(view.valid_end)
    data = view.read(start, min(view.valid_end - 1, start + ID_HEAD))
    return kept(id_in(data[json_start(data) :]))

"""Checking a log whole, for ``verify()``: every line, its head and its chain; and
repairing what can be rebuilt from the lines that are there.

A repair never removes a line. It accepts a loss that was found (and reported): a head
that disagrees with its log is rebuilt from the log as it is; a log whose chain is broken
(a line deleted from the middle) is written again, chained, when none of its lines is
damaged (quarantine handles those); a missing log whose head says lines were committed
is written again empty. A copy of every file it replaces is kept (``keep``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from statekeeper.backends.file._log.head import SLOT, head_path, initial_head, parse_slots
from statekeeper.backends.file._log.lines import (
    CHECKPOINTS,
    ID_HEAD,
    RECORDS,
    DamagedIndex,
    Entry,
    Lost,
    id_in,
    json_start,
    prev_of,
)
from statekeeper.backends.file._log.view import IndexView
from statekeeper.backends.file._log.write import head_for, rewrite

__all__ = ["LogCheck", "check_log", "repair_log"]


@dataclass
class LogCheck:
    """What :func:`check_log` found in one log."""

    path: Path
    kind: str
    entries: list[Entry] = field(default_factory=list)  # its intact lines
    # damaged lines, a damaged header, lines out of order or of another namespace
    damage: list[DamagedIndex] = field(default_factory=list)
    # what it lacks of what was committed: per its head, its chain, or its missing file
    lost: list[Lost] = field(default_factory=list)
    broken_chain: bool = False
    exists: bool = True


def check_log(
    path: Path, kind: str, ids: tuple[str, str], *, heads: bool, missing: Callable[[], Lost | None]
) -> LogCheck:
    """Check the log at ``path`` (of thread and namespace ``ids``); ``missing`` says what
    its absence means (see ``Namespace.missing``)."""
    found = LogCheck(path, kind)
    seen: dict[tuple[str, str | None], DamagedIndex] = {}

    def collect(damage: DamagedIndex) -> None:
        seen.setdefault((str(damage), damage.checkpoint_id), damage)

    try:
        with IndexView(path, collect, kind=kind, heads=heads) as view:
            found.entries = view.all()
            header = _header(view, collect)
            if view.lost is not None:
                seen.pop((str(view.lost.damage), view.lost.damage.checkpoint_id), None)
                found.lost.append(view.lost)
            breaks = _breaks(view)
            found.lost += breaks
            found.broken_chain = bool(breaks)
    except (FileNotFoundError, NotADirectoryError):
        found.exists = False
        if (lost := missing()) is not None:
            found.lost.append(lost)
        return found
    except DamagedIndex as exc:  # not even a header line: whatever it held is lost
        found.lost.append(Lost(exc))
        return found
    if heads and not found.lost and (slot := _damaged_slot(path, kind)) is not None:
        found.lost.append(Lost(slot))
    if header and (header.get("thread_id"), header.get("checkpoint_ns")) != ids:
        collect(DamagedIndex("its header names another thread or namespace", record="index"))
    line_ids = [e.checkpoint_id for e in found.entries]
    pairs = itertools.pairwise(line_ids)
    if any(a > b or (a == b and kind == CHECKPOINTS) for a, b in pairs):
        collect(DamagedIndex("its lines are not in checkpoint id order", record="index"))
    found.damage = list(seen.values())
    return found


def _breaks(view: IndexView) -> list[Lost]:
    """Every place where a line does not name the line before it (reads the whole log):
    a line deleted or spliced in there, or a damaged checksum; each with the ids of the
    lines on either side."""
    found = []
    at, prev, prev_id = view.data_start, view.digest_before(view.data_start), None
    while at < view.valid_end:
        end = view.find_newline(at)
        assert end is not None
        data = view.read(at, min(end, at + ID_HEAD))
        line_id = id_in(data[json_start(data) :])
        if (named := prev_of(data)) is not None and named != prev:
            reason = (
                "a committed line is missing (or out of place) before the line at byte "
                f"{at}" + (f", of checkpoint {line_id!r}" if line_id else "")
            )
            damage = DamagedIndex(reason, line_id, RECORDS[view.kind])
            found.append(Lost(damage, prev_id, line_id))
        prev, prev_id, at = data[:16], line_id, end + 1
    return found


def _header(view: IndexView, collect: Callable[[DamagedIndex], None]) -> dict[str, object]:
    try:
        return view.header()
    except DamagedIndex as exc:
        collect(exc)
        return {}


def _damaged_slot(path: Path, kind: str) -> DamagedIndex | None:
    """A slot of the head that is not intact (while the other one is)."""
    try:
        data = head_path(path).read_bytes()
    except OSError:
        return None
    if len(data) != 2 * SLOT or any(slot is None for slot in parse_slots(data, kind)):
        reason = f"a slot of its head {head_path(path).name} is damaged (the other is intact)"
        return DamagedIndex(reason, record="head")
    return None


def repair_log(
    check: LogCheck, ids: tuple[str, str], *, durable: bool, keep: Callable[[Path], None]
) -> bool:
    """Rebuild what ``check`` found lost from what is there (see the module docstring);
    whether anything was changed. ``keep`` copies a file aside before it is replaced."""
    path, kind = check.path, check.kind
    head = head_path(path)
    if not check.lost:
        return False
    if not check.exists:
        if head.exists():
            keep(head)
        rewrite(path, kind, *ids, [], durable=durable)
        return True
    if check.broken_chain and not check.damage:
        keep(path)
        if head.exists():
            keep(head)
        rewrite(path, kind, *ids, check.entries, durable=durable)
        return True
    if head.exists():
        keep(head)
    try:
        with IndexView(path, lambda _: None, kind=kind) as view:
            rebuilt = head_for(view)
    except DamagedIndex:  # no header line: no line either (it would end the header)
        keep(path)
        rewrite(path, kind, *ids, [], durable=durable)
        return True
    initial_head(head, rebuilt, durable=durable)
    return True

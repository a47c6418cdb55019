"""The thread index every backend serves: each thread's head, newest first.

A thread's *head* is ``(thread_id, checkpoint_id)``: the id of its newest checkpoint in
the root namespace (``checkpoint_ns == ""``). LangGraph makes checkpoint ids grow with
time, so ordering heads by that id lists the most recently written threads first. The
order is total and the same on every backend: ``checkpoint_id`` descending, then
``thread_id`` descending (both compared as Python compares ``str``, which is the byte
order of their UTF-8 text). Two threads can share a newest id (``copy_thread`` keeps
ids), so paging is keyset paging by the whole pair, never by an offset.

:meth:`Checkpointer.thread_heads` answers from an index the backend keeps at write time
(:class:`Head` pairs); :func:`scan_heads` is the fallback that reads every checkpoint once,
for savers without one (LangGraph's own) and for storage written before the index was.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from langgraph.checkpoint.base import BaseCheckpointSaver

from statekeeper.errors import ConfigurationError

__all__ = ["Head", "HeadPager", "check_page", "newest_heads", "pager", "scan_heads"]


class Head(NamedTuple):
    """One thread of the index: its id and the id of its newest root checkpoint."""

    thread_id: str
    checkpoint_id: str

    @property
    def rank(self) -> tuple[str, str]:
        """The sort key (descending): ``(checkpoint_id, thread_id)``."""
        return (self.checkpoint_id, self.thread_id)


# A function returning at most ``limit`` heads after ``after`` (None: from the newest).
HeadPager = Callable[[int, Head | None], list[Head]]


def check_page(limit: object, after: object) -> tuple[int, Head | None]:
    """``thread_heads``' arguments checked: a positive int limit, and ``after`` a
    ``(thread_id, checkpoint_id)`` pair of text or None.

    Raises:
        ConfigurationError: either is of another shape.
    """
    if type(limit) is not int or limit < 1:
        raise ConfigurationError(f"limit must be a positive integer, got {limit!r}")
    if after is None:
        return limit, None
    if (
        not isinstance(after, tuple)
        or len(after) != 2
        or not all(isinstance(part, str) for part in after)
    ):
        raise ConfigurationError(
            f"after must be a (thread_id, checkpoint_id) pair from a previous page, got {after!r}"
        )
    return limit, Head(*after)


def newest_heads(heads: Iterable[Head], limit: int, after: Head | None) -> list[Head]:
    """The first ``limit`` of ``heads`` (in any order) in index order, after ``after``."""
    if after is not None:
        heads = (head for head in heads if head.rank < after.rank)
    return heapq.nlargest(limit, heads, key=lambda head: head.rank)


def scan_heads(saver: BaseCheckpointSaver[Any]) -> list[Head]:
    """Every thread's head, in index order, read from ``saver.list(None)``: every
    checkpoint once, holding one id per thread. A thread with checkpoints only in
    subgraph namespaces has no head."""
    newest: dict[str, str] = {}
    for tup in saver.list(None):
        configurable = tup.config["configurable"]
        if configurable.get("checkpoint_ns", ""):
            continue
        # the id from the config: a transfer's reader may stand a marker in for a
        # checkpoint it refused to read (statekeeper.transfer._guard)
        thread_id, checkpoint_id = configurable["thread_id"], configurable["checkpoint_id"]
        if thread_id not in newest or checkpoint_id > newest[thread_id]:
            newest[thread_id] = checkpoint_id
    return newest_heads((Head(*item) for item in newest.items()), len(newest), None)


def pager(saver: BaseCheckpointSaver[Any]) -> HeadPager:
    """How to page through ``saver``'s heads: its index (a statekeeper checkpointer), or
    one scan kept for the pages that follow (any other saver)."""
    thread_heads = getattr(saver, "thread_heads", None)
    if thread_heads is not None:
        return lambda limit, after: [Head(*h) for h in thread_heads(limit=limit, after=after)]
    scanned: list[Head] | None = None

    def from_scan(limit: int, after: Head | None) -> list[Head]:
        nonlocal scanned
        if scanned is None:
            scanned = scan_heads(saver)
        return newest_heads(scanned, limit, after)

    return from_scan

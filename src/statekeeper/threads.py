"""What a thread looks like in storage, read from its checkpoints alone.

These functions need no graph: they read what LangGraph stored (channel versions, the
versions each node has seen, pending writes) and work on any ``BaseCheckpointSaver``, ours
or LangGraph's. That is what lets ``statekeeper threads``, ``history``, ``show`` and
``diff`` describe a thread whose graph cannot be imported here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint, CheckpointTuple

from statekeeper.errors import ConfigurationError

__all__ = [
    "Change",
    "ThreadPage",
    "ThreadSummary",
    "diff_values",
    "interrupts",
    "list_threads",
    "page_threads",
    "pending_nodes",
    "summaries",
    "summarize",
]

Status = Literal["done", "interrupted", "failed", "pending"]

_BRANCH = "branch:to:"  # LangGraph triggers a StateGraph node by writing this channel
_JOIN = "join:"  # ...or, for a node that waits for several, this barrier channel
_START = "__start__"
_TASKS = "__pregel_tasks"  # Send packets waiting to run
_INTERRUPT = "__interrupt__"
_ERROR = "__error__"


@dataclass(frozen=True)
class ThreadSummary:
    """A thread as its newest root checkpoint describes it."""

    thread_id: str
    checkpoint_id: str
    updated: str  # the checkpoint's timestamp (ISO 8601)
    step: int | None
    status: Status
    next: tuple[str, ...]  # the nodes that would run on resume
    graph: str | None  # "package.module:attr", when run by statekeeper's runner
    schema_version: int | None


@dataclass(frozen=True)
class Change:
    """How one channel differs between two checkpoints. For ``"appended"`` (a list that
    only grew), ``new`` holds just the appended items."""

    channel: str
    kind: Literal["added", "removed", "changed", "appended"]
    old: Any
    new: Any


def list_threads(saver: BaseCheckpointSaver[Any]) -> list[str]:
    """The ids of the threads that have checkpoints, the most recently written first (by
    newest checkpoint id, which LangGraph makes grow with time; LangGraph's own savers do
    not all list newest first). Reads every checkpoint once, holding only thread ids."""
    newest: dict[str, str] = {}
    for tup in saver.list(None):
        thread_id = tup.config["configurable"]["thread_id"]
        if thread_id not in newest or tup.checkpoint["id"] > newest[thread_id]:
            newest[thread_id] = tup.checkpoint["id"]
    return sorted(newest, key=newest.__getitem__, reverse=True)


def pending_nodes(checkpoint: Checkpoint) -> tuple[str, ...]:
    """The nodes LangGraph would run next from ``checkpoint``: those whose trigger
    channel changed since they last ran, then the targets of pending ``Send`` packets."""
    values = checkpoint["channel_values"]
    seen = checkpoint["versions_seen"]
    nodes = [
        node
        for channel, version in checkpoint["channel_versions"].items()
        if (node := _triggered_node(channel))
        # a trigger channel holds a value only until its node has consumed it
        and channel in values
        and _available(channel, values[channel])
        and _newer(version, seen.get(node, {}).get(channel))
    ]
    sends = values.get(_TASKS) or ()
    nodes += [getattr(packet, "node", "?") for packet in sends]
    return tuple(nodes)


def summarize(tup: CheckpointTuple) -> ThreadSummary:
    """The summary of the thread whose newest checkpoint is ``tup``."""
    metadata = tup.metadata or {}
    written = {channel for _, channel, _ in tup.pending_writes or ()}
    next_nodes = pending_nodes(tup.checkpoint)
    status: Status
    if _INTERRUPT in written:
        status = "interrupted"
    elif _ERROR in written:
        status = "failed"
    else:
        status = "pending" if next_nodes else "done"
    graph = metadata.get("statekeeper_graph")
    version = metadata.get("statekeeper_schema_version")
    return ThreadSummary(
        thread_id=tup.config["configurable"]["thread_id"],
        checkpoint_id=tup.checkpoint["id"],
        updated=tup.checkpoint["ts"],
        step=metadata.get("step"),
        status=status,
        next=next_nodes,
        graph=graph if isinstance(graph, str) else None,
        schema_version=version if isinstance(version, int) else None,
    )


def summaries(
    saver: BaseCheckpointSaver[Any], thread_ids: Iterable[str] | None = None
) -> Iterator[ThreadSummary]:
    """A summary per thread (all threads, most recent first, when ``thread_ids`` is None);
    threads with no root checkpoint are left out."""
    for thread_id in list_threads(saver) if thread_ids is None else thread_ids:
        tup = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
        if tup is not None:
            yield summarize(tup)


def diff_values(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Change]:
    """The channels that differ from ``old`` to ``new``, in channel name order."""
    changes = []
    for channel in sorted(old.keys() | new.keys()):
        if channel not in new:
            changes.append(Change(channel, "removed", old[channel], None))
        elif channel not in old:
            changes.append(Change(channel, "added", None, new[channel]))
        elif old[channel] != new[channel]:
            before, after = old[channel], new[channel]
            if isinstance(before, list) and isinstance(after, list) and _extends(after, before):
                changes.append(Change(channel, "appended", before, after[len(before) :]))
            else:
                changes.append(Change(channel, "changed", before, after))
    return changes


def _triggered_node(channel: str) -> str | None:
    if channel == _START:  # the input: its own channel triggers the __start__ node
        return _START
    if channel.startswith(_JOIN):  # "join:a+b:node", written by add_edge(["a", "b"], node)
        return channel.rpartition(":")[2] or None
    return channel[len(_BRANCH) :] if channel.startswith(_BRANCH) else None


def _available(channel: str, value: Any) -> bool:
    """Whether a stored trigger channel would trigger its node. A join (LangGraph's
    ``NamedBarrierValue``) triggers only once every node it waits for has written;
    it stores the names seen so far, or ``(seen, finished)`` for a deferred node."""
    if not channel.startswith(_JOIN):
        return True
    waits_for = set(channel[len(_JOIN) :].rpartition(":")[0].split("+"))
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], bool):
        value = value[0]
    try:
        return set(value) >= waits_for
    except TypeError:  # not a collection of names: LangGraph's layout changed; assume work
        return True


def _extends(longer: list[Any], prefix: list[Any]) -> bool:
    return len(longer) > len(prefix) and longer[: len(prefix)] == prefix


def _newer(version: Any, seen: Any) -> bool:
    if seen is None:
        return True
    try:
        return bool(version > seen)
    except TypeError:  # versions of mixed types (a saver changed its scheme): assume new
        return bool(version != seen)


# -- paging and interrupts (the inspector's list and its answer forms) ---------------------


@dataclass(frozen=True)
class ThreadPage:
    """One page of :func:`page_threads`: thread ids, most recently written first, and the
    cursor that opens the next page (``None`` on the last one). The cursor is opaque:
    pass it back as it is."""

    thread_ids: tuple[str, ...]
    cursor: str | None


def page_threads(
    saver: BaseCheckpointSaver[Any],
    *,
    limit: int = 50,
    cursor: str | None = None,
    match: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> ThreadPage:
    """At most ``limit`` thread ids, most recently written first, starting after
    ``cursor`` (from the previous page; ``None``: the first page). ``match`` keeps the
    threads whose id contains it (ignoring case); ``metadata`` keeps those with a
    checkpoint whose metadata has each of its keys with an equal value (the savers'
    ``filter``).

    Reads every checkpoint's id (as :func:`list_threads` does): the one place a thread
    index replaces, so its callers need not change.

    Raises:
        ConfigurationError: ``limit`` is not positive, or ``cursor`` is not one this
            function returned for these threads (the thread it names is gone).
    """
    if limit < 1:
        raise ConfigurationError(f"limit must be at least 1, got {limit}")
    if metadata:
        newest: dict[str, str] = {}
        for tup in saver.list(None, filter=dict(metadata)):
            thread_id = tup.config["configurable"]["thread_id"]
            if thread_id not in newest or tup.checkpoint["id"] > newest[thread_id]:
                newest[thread_id] = tup.checkpoint["id"]
        ordered = sorted(newest, key=newest.__getitem__, reverse=True)
    else:
        ordered = list_threads(saver)
    if match:
        needle = match.casefold()
        ordered = [thread_id for thread_id in ordered if needle in thread_id.casefold()]
    start = 0
    if cursor is not None:
        try:
            start = ordered.index(cursor) + 1
        except ValueError:
            raise ConfigurationError(
                f"cursor {cursor!r} names no listed thread (it was deleted or no longer "
                "matches); start again from the first page"
            ) from None
    page = tuple(ordered[start : start + limit])
    more = start + limit < len(ordered)
    return ThreadPage(page, page[-1] if more and page else None)


def interrupts(tup: CheckpointTuple) -> list[Any]:
    """The ``interrupt()`` values stored at ``tup`` (LangGraph's ``Interrupt`` objects,
    each with its ``id`` and ``value``), in pending-write order; empty when none waits."""
    found: list[Any] = []
    for _, channel, values in tup.pending_writes or ():
        if channel == _INTERRUPT:
            found.extend(values if isinstance(values, list | tuple) else [values])
    return found

"""What a thread looks like in storage, read from its checkpoints alone.

These functions need no graph: they read what LangGraph stored (channel versions, the
versions each node has seen, pending writes) and work on any ``BaseCheckpointSaver``, ours
or LangGraph's. That is what lets ``statekeeper threads``, ``history``, ``show`` and
``diff`` describe a thread whose graph cannot be imported here.

:func:`summarize` is the one place that decides a thread's status; the runner (whether
``resume`` has anything to do), ``statekeeper threads`` and any inspector all ask it. It
reads the newest root checkpoint *and its pending writes*, because a super-step whose
tasks all saved their writes before the process died has no next checkpoint yet:
LangGraph's ``get_state().next`` is then empty, but the run is not finished, and
``invoke(None)`` carries on from those writes. The statuses, first match wins:

``running``
    a live run holds the thread's claim (:meth:`Checkpointer.claim_holder`);
``interrupted``
    a task waits at an ``interrupt()`` whose answer is not stored (a subgraph's interrupt
    is recorded by the parent task that runs the subgraph, so it shows here too);
``failed``
    a task of the current step raised (its ``__error__`` write is stored);
``pending``
    nodes are left to run: triggered by the checkpoint's channels (join barriers
    included), by ``Send`` packets, or by writes stored for the next step (a stored
    answer to the interrupt, a ``Command(goto=...)``) — also a subgraph whose run was
    cut short, since the parent task running it has not completed;
``done``
    none of the above: nothing is left to run.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint, CheckpointTuple

from statekeeper._thread_args import check_limit, check_listing, decode_cursor, encode_cursor
from statekeeper.checkpointers.heads import Head, pager
from statekeeper.errors import ConfigurationError, StatekeeperError

__all__ = [
    "STATUSES",
    "Change",
    "Status",
    "ThreadPage",
    "ThreadSummary",
    "claim_holder",
    "diff_values",
    "interrupts",
    "list_threads",
    "page_threads",
    "pending_nodes",
    "summaries",
    "summarize",
    "thread_summary",
]

Status = Literal["running", "interrupted", "failed", "pending", "done"]
STATUSES: tuple[Status, ...] = ("running", "interrupted", "failed", "pending", "done")

_BRANCH = "branch:to:"  # LangGraph triggers a StateGraph node by writing this channel
_JOIN = "join:"  # ...or, for a node that waits for several, this barrier channel
_START = "__start__"
_TASKS = "__pregel_tasks"  # Send packets waiting to run
_RESUME = "__resume__"  # an answer to an interrupt, stored before the task uses it
_NULL_TASK = "00000000-0000-0000-0000-000000000000"  # writes that are input to the step
_INTERRUPT = "__interrupt__"  # the interrupts a task raised (its latest)
_ERROR = "__error__"  # the exception a task raised
# the writes that say what happened to a task, not what it produced (CONTROL_WRITES)
_CONTROL = frozenset((_INTERRUPT, _ERROR, "__error_source_node__", _RESUME))
_PAGE = 200  # heads read from the index per call when filtering or listing all


@dataclass(frozen=True)
class ThreadSummary:
    """A thread as its newest root checkpoint and its pending writes describe it (see
    the module docstring for how ``status`` is decided)."""

    thread_id: str
    checkpoint_id: str
    updated: str  # the checkpoint's timestamp (ISO 8601)
    step: int | None
    status: Status
    next: tuple[str, ...]  # the nodes that would run on resume
    graph: str | None  # "package.module:attr", when run by statekeeper's runner
    schema_version: int | None
    interrupts: tuple[Any, ...] = ()  # the interrupts waiting for an answer
    holder: dict[str, Any] | None = None  # the run holding the thread, when "running"

    @property
    def finished(self) -> bool:
        """Whether nothing is left to run (status ``done``): ``resume`` has nothing to do."""
        return self.status == "done"


@dataclass(frozen=True)
class Change:
    """How one channel differs between two checkpoints. For ``"appended"`` (a list that
    only grew), ``new`` holds just the appended items."""

    channel: str
    kind: Literal["added", "removed", "changed", "appended"]
    old: Any
    new: Any


def list_threads(
    saver: BaseCheckpointSaver[Any],
    *,
    limit: int | None = None,
    after: str | None = None,
    status: Status | Iterable[Status] | None = None,
    metadata: Mapping[str, Any] | None = None,
    match: str | None = None,
) -> list[str]:
    """The ids of the threads that have a root checkpoint, the most recently written
    first (by newest root checkpoint id, which LangGraph makes grow with time; ties by
    thread id, descending): at most ``limit`` of them (``None``: all), those listed after
    the thread ``after`` (where its newest checkpoint places it now).

    Filters, each narrowing the others: ``status`` keeps the threads :func:`summarize`
    classifies so (one status or several; a thread whose head cannot be read matches
    none); ``metadata`` those with a checkpoint whose metadata has each of its keys with
    an equal value (the savers' ``filter``); ``match`` those whose id contains it,
    ignoring case.

    Cost: a statekeeper checkpointer reads its thread index a page at a time, so with no
    filter this is O(limit), whatever the number of threads; ``match`` and ``status``
    read the index (and, for ``status``, each thread's head) only until ``limit``
    threads matched; ``metadata`` first lists the checkpoints that match it
    (``saver.list(None, filter=...)``: every checkpoint, unless the backend narrows
    it). Another saver (LangGraph's own) is scanned once: every checkpoint.

    Raises:
        ConfigurationError: an argument of the wrong type (``limit`` a positive int,
            ``after`` a thread id, ``status`` one of :data:`STATUSES` or several,
            ``metadata`` a mapping with ``str`` keys, ``match`` text), or ``after`` names
            no thread with a root checkpoint. Nothing is read before the check.
    """
    check_limit(limit, optional=True)
    wanted = check_listing(STATUSES, after=after, status=status, metadata=metadata, match=match)
    start = None if after is None else _head_of(saver, after)
    heads = _heads(saver, start, _keep(saver, wanted, metadata, match), limit)
    return [head.thread_id for head in itertools.islice(heads, limit)]


def _heads(
    saver: BaseCheckpointSaver[Any],
    start: Head | None,
    keep: Callable[[Head], bool] | None,
    want: int | None,
) -> Iterator[Head]:
    """The heads after ``start`` that ``keep`` keeps (all, when None), newest first, read
    from the index in pages sized for ``want`` results (``None``: as many as there are)."""
    page = pager(saver)
    size = _PAGE if want is None else want + 1 if keep is None else max(want + 1, _PAGE)
    while True:
        found = page(size, start)
        yield from found if keep is None else filter(keep, found)
        if len(found) < size:
            return
        start = found[-1]


def _keep(
    saver: BaseCheckpointSaver[Any],
    wanted: frozenset[str] | None,
    metadata: Mapping[str, Any] | None,
    match: str | None,
) -> Callable[[Head], bool] | None:
    """The test a listing's filters (checked by ``check_listing``) make of a head;
    ``None`` when nothing is filtered."""
    tests: list[Callable[[Head], bool]] = []
    if match:
        needle = match.casefold()
        tests.append(lambda head: needle in head.thread_id.casefold())
    if metadata:
        from statekeeper._storage.serde import skeleton_reader

        members = {  # a thread id is all that is needed of each: no value is built
            tup.config["configurable"]["thread_id"]
            for tup in skeleton_reader(saver).list(None, filter=dict(metadata))
        }
        tests.append(lambda head: head.thread_id in members)
    if wanted is not None:
        tests.append(lambda head: _status_of(saver, head.thread_id) in wanted)
    if not tests:
        return None
    return lambda head: all(test(head) for test in tests)


def _status_of(saver: BaseCheckpointSaver[Any], thread_id: str) -> Status | None:
    try:
        summary = thread_summary(saver, thread_id)
    except StatekeeperError:  # a damaged head: listed by no status (verify reports it)
        return None
    return None if summary is None else summary.status


def _head_of(saver: BaseCheckpointSaver[Any], thread_id: str) -> Head:
    """Where ``thread_id`` stands in the index now: its newest root checkpoint."""
    config: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    tup = saver.get_tuple(config)
    if tup is None:
        raise ConfigurationError(
            f"after={thread_id!r} names no thread with a checkpoint; list from the start"
        )
    return Head(thread_id, tup.checkpoint["id"])


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


def summarize(tup: CheckpointTuple, *, holder: dict[str, Any] | None = None) -> ThreadSummary:
    """The summary of the thread whose newest root checkpoint is ``tup`` (with its
    pending writes, as ``get_tuple`` returns it). ``holder``: who holds the thread's
    claim, if anyone (:func:`thread_summary` looks it up); it makes the status
    ``running``."""
    metadata = tup.metadata or {}
    writes = list(tup.pending_writes or ())
    tasks = _task_statuses(writes)
    waiting = _waiting(writes, tasks)
    next_nodes = pending_nodes(tup.checkpoint) + _triggered_by_input(writes)
    status: Status
    if holder is not None:
        status = "running"
    elif waiting:
        status = "interrupted"
    elif any(task.error is not None for task in tasks.values()):
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
        interrupts=waiting,
        holder=holder,
    )


def thread_summary(saver: BaseCheckpointSaver[Any], thread_id: str) -> ThreadSummary | None:
    """The summary of ``thread_id``: its newest root checkpoint and pending writes,
    and whether a live run holds it (a saver without claims, such as LangGraph's own,
    never says ``running``). ``None`` when the thread has no root checkpoint."""
    tup = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
    if tup is None:
        return None
    return summarize(tup, holder=claim_holder(saver, thread_id))


def claim_holder(saver: BaseCheckpointSaver[Any], thread_id: str) -> dict[str, Any] | None:
    """Who holds ``thread_id``'s claim on ``saver`` (``None``: nobody, or a saver
    without claims); never takes the claim."""
    peek = getattr(saver, "claim_holder", None)
    if peek is None:
        return None
    try:
        holder = peek(thread_id)
    except NotImplementedError:  # a Checkpointer subclass without claims
        return None
    return holder if isinstance(holder, dict) else None


def summaries(
    saver: BaseCheckpointSaver[Any], thread_ids: Iterable[str] | None = None
) -> Iterator[ThreadSummary]:
    """A summary per thread (all threads, most recent first, when ``thread_ids`` is None);
    threads with no root checkpoint are left out."""
    for thread_id in list_threads(saver) if thread_ids is None else thread_ids:
        summary = thread_summary(saver, thread_id)
        if summary is not None:
            yield summary


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


@dataclass(frozen=True)
class _TaskStatus:
    finished: bool
    interrupts: tuple[Any, ...]
    error: Any

    @property
    def pending_interrupts(self) -> tuple[Any, ...]:
        return () if self.finished else self.interrupts


def _task_statuses(writes: list[Any]) -> Mapping[str, _TaskStatus]:
    """Each task's status, read from the step's ``writes`` by LangGraph's rules
    (``langgraph.pregel._task_status.read_task_statuses``): writes of the null task are
    input, not a task's; a task finished if and only if it has an output write (any but
    a control write); its ``__interrupt__`` write holds its latest interrupts, its first
    ``__error__`` write its error. Read here because importing LangGraph's reader
    imports ``langgraph.pregel``, the runtime, and costs ``statekeeper threads`` half a
    second; tests/test_startup.py checks that both read every case alike."""
    output: dict[str, bool] = {}
    interrupts: dict[str, list[Any]] = {}
    errors: dict[str, Any] = {}
    for task_id, channel, value in writes:
        if task_id == _NULL_TASK:
            continue
        output.setdefault(task_id, False)
        if channel == _INTERRUPT:
            interrupts.setdefault(task_id, []).extend(
                value if isinstance(value, Sequence) else [value]
            )
        elif channel == _ERROR:
            errors.setdefault(task_id, value)
        elif channel not in _CONTROL:
            output[task_id] = True
    return {
        task_id: _TaskStatus(finished, tuple(interrupts.get(task_id, ())), errors.get(task_id))
        for task_id, finished in output.items()
    }


def _waiting(writes: list[Any], tasks: Mapping[str, Any]) -> tuple[Any, ...]:
    """The interrupts waiting for an answer: those of the tasks that have not finished
    (as LangGraph reads them), unless the answer is stored already. An answer given as a
    single value (``Command(resume=value)``) is stored as a write of the step's input and
    goes to the one interrupt waiting; ``invoke(None)`` then hands it over."""
    pending = tuple(i for task in tasks.values() for i in task.pending_interrupts)
    answered = any(task == _NULL_TASK and channel == _RESUME for task, channel, _ in writes)
    return () if answered and len(pending) == 1 else pending


def _triggered_by_input(writes: list[Any]) -> tuple[str, ...]:
    """The nodes that writes stored as input to the next step trigger: a
    ``Command(goto=...)`` stored before the step ran (a node name, or a ``Send``)."""
    nodes = []
    for task, channel, value in writes:
        if task != _NULL_TASK:
            continue
        if channel == _TASKS:
            nodes.append(getattr(value, "node", "?"))
        elif channel.startswith(_BRANCH):
            nodes.append(channel[len(_BRANCH) :])
    return tuple(nodes)


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
    status: Status | Iterable[Status] | None = None,
) -> ThreadPage:
    """At most ``limit`` thread ids, most recently written first, starting after
    ``cursor`` (from the previous page; ``None``: the first page), filtered as
    :func:`list_threads` filters (``match``, ``metadata``, ``status``), at its cost.

    Keyset paging: the cursor holds the place of the page's last thread in the thread
    index, so paging on while threads are written lists every thread not written
    meanwhile exactly once (a thread written meanwhile moves to the first page), and a
    thread deleted meanwhile does not stop it.

    Raises:
        ConfigurationError: an argument of the wrong type (as for :func:`list_threads`),
            or ``cursor`` is not one this function returned.
    """
    check_limit(limit, optional=False)
    wanted = check_listing(STATUSES, status=status, metadata=metadata, match=match)
    start = None if cursor is None else decode_cursor(cursor)
    heads = _heads(saver, start, _keep(saver, wanted, metadata, match), limit)
    found = list(itertools.islice(heads, limit + 1))
    page = found[:limit]
    more = len(found) > limit
    return ThreadPage(tuple(h.thread_id for h in page), encode_cursor(page[-1]) if more else None)


def interrupts(tup: CheckpointTuple) -> list[Any]:
    """The ``interrupt()``s waiting for an answer at ``tup`` (LangGraph's ``Interrupt``
    objects, each with its ``id`` and ``value``), in pending-write order; empty when none
    waits. The same as :func:`summarize`'s ``interrupts``: those of tasks that have not
    finished, unless the answer is stored already."""
    writes = list(tup.pending_writes or ())
    return list(_waiting(writes, _task_statuses(writes)))

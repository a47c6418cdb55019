"""How the file checkpointer reads a checkpoint, its pending writes and a delta channel's
history: the loading half of :class:`~statekeeper.backends.file.checkpointer.FileCheckpointer`.

A checkpoint's line holds its metadata, the checkpoint without its values, and where each
value is; values stored by earlier checkpoints are found by bisecting the ``checkpoints``
file, which is opened only when a value (or a delta's base) lives in another line.

Reading across threads (``list(None)``, ``thread_heads``) follows the index (``index/``,
:mod:`._log.catalog`) when it can be trusted: the threads and checkpoints it names, newest
first, each checked against the thread's own log before it is returned; otherwise, and
from where the index turns out to lack something, it reads every thread, as it must
without one. A rebuild of the index reads every thread too (:func:`scan_threads`).
"""

from __future__ import annotations

import bisect
import contextlib
import heapq
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from langgraph.checkpoint.base import Checkpoint, CheckpointTuple, DeltaChannelHistory, PendingWrite
from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper._storage.lineage import assemble_history
from statekeeper._storage.payload import decode
from statekeeper._storage.remembered import RecentPayloads
from statekeeper.backends.file._layout import decode_name, is_hashed
from statekeeper.backends.file._log.catalog import Catalog, Scanned
from statekeeper.backends.file._log.catalog_files import CatalogDamage
from statekeeper.backends.file._log.catalog_view import PENDING, Key, View
from statekeeper.backends.file._log.head import head_newest
from statekeeper.backends.file._log.lines import (
    CHECKPOINTS,
    ID_HEAD,
    DamagedIndex,
    Entry,
    id_in,
    json_start,
    parser,
)
from statekeeper.backends.file._log.view import IndexView
from statekeeper.backends.file._namespace import (
    Damaged,
    Namespace,
    Payload,
    WriteRow,
    corrupt_error,
    names_in,
    reporting,
)
from statekeeper.backends.file._records import Store
from statekeeper.backends.file._values import Known, Lines, Memo, lines_of, read_value, walk
from statekeeper.checkpointers.base import TaskWrite
from statekeeper.checkpointers.heads import Head, newest_heads
from statekeeper.checkpointers.semantics import checkpoint_config, matches
from statekeeper.errors import CorruptCheckpointError

__all__ = [
    "Reader",
    "delta_history",
    "listing",
    "pending_writes",
    "root_head",
    "scan_thread",
    "scan_threads",
    "task_writes",
    "thread_heads",
]

log = logging.getLogger("statekeeper.backends.file.checkpointer")


@dataclass(frozen=True, slots=True)
class Reader:
    """Reads checkpoints of namespace ``n`` with the saver's ``serde``, store and last
    written payloads (``recent``); while listing, also with the payloads rebuilt from
    deltas so far (``memo``) and the lines already read by ``Store.newest`` (``seen``),
    which need not be looked up again."""

    serde: SerializerProtocol
    store: Store
    n: Namespace
    recent: RecentPayloads
    memo: Memo | None = None
    seen: Mapping[str, Entry] = field(default_factory=dict)

    def load(
        self, entry: Entry, *, may_skip: bool, filter: dict[str, Any] | None = None
    ) -> CheckpointTuple | None:
        """The tuple of a listed checkpoint; None if ``filter`` rejects it, if it was
        deleted while being read, or (reading leniently, ``on_corrupt="fallback"``, and
        ``may_skip``) if it is damaged, which is then logged.

        Raises:
            CorruptCheckpointError: it is damaged, naming the thread, checkpoint and file.
        """
        if filter and not matches(entry.record["metadata"], filter):
            return None
        n, checkpoint_id = self.n, entry.checkpoint_id
        try:
            return self.read(entry)
        except FileNotFoundError as missing:
            if next(self.store.newest(n, None, checkpoint_id), None) is None:
                return None  # deleted (pruned, thread removed) while we read it: not damage
            reason = getattr(missing, "reason", "the file is missing")
            record = getattr(missing, "record", "value")
            error = corrupt_error(n, checkpoint_id, missing.args[0], reason, record)
        except Damaged as damage:
            error = corrupt_error(n, checkpoint_id, damage.path, damage.reason, damage.record)
        if may_skip and self.store.lenient:
            log.warning("%s; skipped, using an older checkpoint (on_corrupt='fallback')", error)
            return None
        raise error

    def read(self, entry: Entry) -> CheckpointTuple:
        """The checkpoint of ``entry`` with its values and pending writes, unfiltered.

        Raises:
            Damaged: a part of it is damaged.
            FileNotFoundError: a file it needs is gone (damage, or deleted meanwhile).
        """
        n, record = self.n, entry.record
        checkpoint: Checkpoint = decode(self.serde, *n.checkpoint_payload(entry))
        checkpoint["channel_values"] = self._values(entry)
        parent = entry.parent_id
        return CheckpointTuple(
            config=checkpoint_config(n.thread_id, n.ns, entry.checkpoint_id),
            checkpoint=checkpoint,
            metadata=record["metadata"],
            parent_config=checkpoint_config(n.thread_id, n.ns, parent) if parent else None,
            pending_writes=pending_writes(self.serde, n.write_rows(entry.checkpoint_id)),
        )

    def _values(self, entry: Entry) -> dict[str, Any]:
        """The channel values of ``entry``, decoded. The ``checkpoints`` file is opened
        (once) only for values stored by lines not at hand."""
        record = entry.record
        versions = record["channel_versions"]
        values = {}
        with contextlib.ExitStack() as stack:
            opened: list[Lines] = []

            def lines(checkpoint_id: str) -> Entry | None:
                if checkpoint_id == entry.checkpoint_id:
                    return entry
                if checkpoint_id in self.seen:
                    return self.seen[checkpoint_id]
                if not opened:  # open the file only for values stored by other lines
                    opened.append(
                        lines_of(stack.enter_context(self.store.index(self.n, again=True)), entry)
                    )
                return opened[0](checkpoint_id)

            known = Known(self.recent, self.memo)
            for channel, at in record["values"].items():
                version = versions[channel]
                type_, codec, data = read_value(self.n, lines, at, channel, version, known)
                key = (self.n.thread_id, self.n.ns, channel)
                values[channel] = (  # remembered bytes: what the next put appends to
                    decode(self.serde, type_, codec, data)
                    if codec
                    else self.recent.load(self.serde, key, type_, data)
                )
        return values


def task_writes(
    serde: SerializerProtocol, rows: Sequence[WriteRow], channel: str | None = None
) -> list[TaskWrite]:
    """Stored write rows (in ``writes_sort_key`` order) decoded in that order; only those
    to ``channel`` if given."""
    return [
        TaskWrite(task_id, task_path, ch, decode(serde, type_, codec, blob))
        for task_id, _, ch, task_path, type_, codec, blob in rows
        if channel is None or ch == channel
    ]


def pending_writes(
    serde: SerializerProtocol, rows: Sequence[WriteRow], channel: str | None = None
) -> list[PendingWrite]:
    """:func:`task_writes` as LangGraph's ``(task_id, channel, value)``."""
    return [(w.task_id, w.channel, w.value) for w in task_writes(serde, rows, channel)]


def delta_history(
    serde: SerializerProtocol,
    store: Store,
    n: Namespace,
    checkpoint_id: str | None,
    channels: Sequence[str],
) -> Mapping[str, DeltaChannelHistory]:
    """See ``FileCheckpointer.get_delta_channel_history``: follows parent ids through the
    ``checkpoints`` file (bisecting it once per ancestor), reading only the writes and
    seeds it needs."""
    target = next(store.newest(n, None, checkpoint_id), None)
    chains: dict[str, list[str]] = {ch: [] for ch in channels}
    seeds: dict[str, Payload] = {}
    rows: dict[str, list[WriteRow]] = {}
    if target is not None:
        with reporting(n, target.checkpoint_id), store.index(n) as view:
            chains, seeds = walk(n, view, target, channels)
            for ancestor in {c for chain in chains.values() for c in chain}:
                rows[ancestor] = n.write_rows(ancestor)

    def writes_of(ancestor: str, ch: str) -> list[PendingWrite]:
        return pending_writes(serde, rows[ancestor], ch)

    decoded = {ch: decode(serde, *payload) for ch, payload in seeds.items()}
    return assemble_history(channels, chains, decoded, writes_of)


# -- reading across threads ------------------------------------------------------------------

Item = tuple[Key, Namespace, Entry]  # a listed checkpoint: its key in the listing's order
_ID_KEY = b'{"checkpoint_id":'  # how every line's JSON begins


def root_head(store: Store, thread_id: str) -> str | None:
    """The id of the thread's newest root checkpoint (None: it has none): from its root
    log's head when the log ends where the head says (a small read and a ``stat``), else
    from the log's last line. What every listing of threads returns, and checks the
    index against.

    Raises:
        CorruptCheckpointError: the root log is damaged (and read strictly).
    """
    n = store.namespace(thread_id, "")
    newest = head_newest(n.index) if store.heads else None
    if newest is None:
        entry = next(store.newest(n, None), None)
        newest = entry.checkpoint_id if entry is not None else None
    return newest


def thread_heads(store: Store, limit: int, after: Head | None) -> list[Head]:
    """A page of the thread index (see ``Checkpointer.thread_heads``): the threads the
    index names, newest first, each placed by the head its own log has (see
    :func:`_heads_page`); or every thread's head when there is no index to trust."""
    view = store.catalog.view()
    if view is not None:
        try:
            return _heads_page(store, view, limit, after)
        except CatalogDamage as damage:  # a compaction replaced the sorted files meanwhile?
            view = store.catalog.view()
            if view is not None:
                with contextlib.suppress(CatalogDamage):
                    return _heads_page(store, view, limit, after)
            store.catalog.warn(str(damage))
    heads = []
    for thread_id in store.thread_ids():
        if (newest := root_head(store, thread_id)) is not None:
            heads.append(Head(thread_id, newest))
    return newest_heads(heads, limit, after)


def _heads_page(store: Store, view: View, limit: int, after: Head | None) -> list[Head]:
    """The index's heads below ``after``, greatest first, each read from its thread's log
    (:func:`root_head`) and placed where that puts it: an index entry is a hint, and the
    log is what a listing of every thread reads. The index is never behind a thread (a
    change is announced before it is made, see :mod:`._log.catalog`), so no thread not
    met yet can rank above the next entry: once ``limit`` heads read rank above it, the
    page is complete. Threads whose head is pending are read first."""
    bound = after.rank if after is not None else None
    found: list[tuple[str, str]] = []  # (checkpoint id, thread id), greatest first

    def read(thread_id: str) -> None:
        newest = root_head(store, thread_id)
        if newest is not None and (bound is None or (newest, thread_id) < bound):
            at = len(found) - bisect.bisect_left(found[::-1], (newest, thread_id))
            found.insert(at, (newest, thread_id))

    for thread_id in sorted(view.pending):
        read(thread_id)
    for entry in view.heads_desc(bound):
        if len(found) >= limit and found[limit - 1] > entry:
            break
        read(entry[1])
    return [Head(thread_id, checkpoint_id) for checkpoint_id, thread_id in found[:limit]]


class _Unindexed(Exception):
    """A thread has a checkpoint the index lacks (or the index is damaged): the listing
    goes on by reading every thread, below ``last``, the key of the last one returned."""

    def __init__(self, last: Key | None) -> None:
        super().__init__(last)
        self.last = last


def listing(
    store: Store,
    scope: tuple[str | None, str | None, str | None],
    below: str | None,
    page: int,
    seen: dict[Namespace, dict[str, Entry]],
) -> Iterator[Item]:
    """The checkpoints ``list`` returns (``scope``: its thread, namespace and checkpoint
    id, each None for all), newest first (checkpoint id, then thread and namespace,
    descending), below ``below``: from the index across threads (see the module
    docstring), else from every namespace in scope. ``seen`` collects the lines read."""
    thread_id, ns, checkpoint_id = scope
    catalog = store.catalog
    view = catalog.view() if thread_id is None else None
    last: Key | None = None
    if view is not None:
        try:
            for item in _indexed(store, view, below, page, seen):
                last = item[0]
                yield item
            return
        except _Unindexed as stop:
            catalog.warn("it lacks a checkpoint a thread has (or is damaged)")
            last = stop.last
    streams = [
        _stream(store, n, below, checkpoint_id, page, seen) for n in store.scope(thread_id, ns)
    ]
    for item in heapq.merge(*streams, key=lambda item: item[0], reverse=True):
        if last is None or item[0] < last:
            yield item


def _stream(
    store: Store,
    n: Namespace,
    below: str | None,
    checkpoint_id: str | None,
    page: int,
    seen: dict[Namespace, dict[str, Entry]],
) -> Iterator[Item]:
    lines = seen.setdefault(n, {})
    for entry in store.newest(n, below, checkpoint_id, page=page, seen=lines):
        yield (entry.checkpoint_id, n.thread_id, n.ns), n, entry


class _Top(NamedTuple):
    """The next checkpoint of one namespace's stream, ordered greatest key first."""

    key: Key
    item: Item
    stream: Iterator[Item]

    def __lt__(self, other: object) -> bool:
        return isinstance(other, _Top) and self.key > other.key


def _indexed(
    store: Store, view: View, below: str | None, page: int, seen: dict[Namespace, dict[str, Entry]]
) -> Iterator[Item]:
    """Every checkpoint below ``below``, newest first, reading only the namespaces the
    index names as it goes: a namespace's log is opened at the first of its checkpoints the
    index names, and read from there as any namespace is. Each checkpoint returned is one
    its log holds (what the index names and the log lacks was deleted, or never committed
    by a killed writer: skipped); one the log holds and the index lacks is looked up in the
    index read anew: a put made since the listing began is returned if it comes after
    what was returned so far, else skipped (the listing is of the index as it was read);
    one the index still lacks raises :class:`_Unindexed`."""
    catalog = store.catalog
    heap: list[_Top] = []
    opened: set[tuple[str, str]] = set()
    last: Key | None = None
    bound: Key | None = (below, "", "") if below is not None else None
    candidates = view.entries_desc(bound)

    def push(stream: Iterator[Item]) -> None:
        if (item := next(stream, None)) is not None:
            heapq.heappush(heap, _Top(item[0], item, stream))

    while True:
        try:
            candidate = next(candidates, None)
        except CatalogDamage:  # a compaction replaced the sorted files meanwhile?
            fresh = catalog.view()
            if fresh is None or fresh.state == view.state:
                raise _Unindexed(last) from None
            view, candidates = fresh, fresh.entries_desc(bound)
            continue
        if candidate is not None and (where := candidate[1:]) not in opened:
            opened.add(where)
            push(_stream(store, store.namespace(*where), below, None, page, seen))
        while heap and (candidate is None or heap[0].key >= candidate):
            top = heapq.heappop(heap)
            if top.key != candidate:  # not in the view: put since it was read, or lost
                if not _announced(catalog, top.key):
                    raise _Unindexed(last)
                if last is not None and top.key > last:  # newer than what was returned:
                    push(top.stream)  # put after the listing began, so not part of it
                    continue
            yield top.item
            last = top.key
            push(top.stream)
        if candidate is None:
            return
        bound = candidate


def _announced(catalog: Catalog, key: Key) -> bool:
    """Whether the index, read anew, names ``key`` (put since the listing began)."""
    fresh = catalog.view()
    return fresh is not None and fresh.contains(key)


# -- building the index ----------------------------------------------------------------------


def scan_threads(store: Store) -> Iterator[Scanned]:
    """Every thread folder as a rebuild of the index reads it (:func:`scan_thread`).

    Raises:
        StorageError: the ``threads`` folder is not one (an index built from no threads
            would hide them all).
    """
    store.check_threads()
    for name in names_in(store.threads):
        if (store.threads / name).is_dir():
            yield scan_thread(store, store.threads / name)


def scan_thread(store: Store, folder: Path) -> Scanned:
    """One thread folder, read leniently (damage is verify()'s to report): the ids of the
    checkpoints of each namespace — with those of damaged lines and of lines a log lost,
    when they can be read, so a listing opens that log and finds the damage as a scan
    would — and the thread's head (PENDING when it cannot be read). ``thread_id`` None
    (with ``problem``) when a namespace that has lines cannot be told or read."""
    thread_id = None if is_hashed(folder.name) else _decoded(folder.name)
    checkpoints: dict[str, list[str]] = {}
    for ns_name in names_in(folder):
        damage: list[DamagedIndex] = []
        try:
            with IndexView(
                folder / ns_name / CHECKPOINTS, damage.append, heads=store.heads
            ) as view:
                header = view.header()
                found = _live_ids(view, damage)
        except (FileNotFoundError, NotADirectoryError):
            continue  # not a namespace with checkpoints (or not ours)
        except DamagedIndex:
            header, found = {}, None
        owner, ns = header.get("thread_id"), header.get("checkpoint_ns")
        if not isinstance(owner, str) or not isinstance(ns, str) or thread_id not in (None, owner):
            return Scanned(None, {}, None, f"{folder / ns_name}: its header cannot be read")
        if found is None:
            return Scanned(None, {}, None, f"{folder / ns_name}: its log cannot be read")
        thread_id, checkpoints[ns] = owner, found
    if thread_id is None:
        return Scanned(None, {}, None)  # no namespace with a log: nothing to index
    try:
        head: Any = root_head(store, thread_id)
    except CorruptCheckpointError:
        head = PENDING
    return Scanned(thread_id, checkpoints, head)


def _live_ids(view: IndexView, damage: list[DamagedIndex]) -> list[str] | None:
    """The ids of the checkpoints of the log ``view`` is open on, but deleted ones (see
    :func:`scan_thread`): read from the head of each line, each line parsed whole only when
    that fails; None if it has damage and no id can be read."""
    ids = []
    parse = parser(CHECKPOINTS)
    for raw in view.read(view.data_start, view.valid_end).split(b"\n")[:-1]:
        start = json_start(raw)
        checkpoint_id = id_in(raw[start : start + ID_HEAD])
        if checkpoint_id is not None:
            after = raw.find(b",", start + len(_ID_KEY))
            if not raw.startswith(b',"deleted":true', after):  # a deleted line: not listed
                ids.append(checkpoint_id)
            continue
        try:  # a long id, or damage
            entry = parse(raw)
        except DamagedIndex as exc:
            damage.append(exc)
            continue
        if not entry.deleted:
            ids.append(entry.checkpoint_id)
    if view.lost is not None:
        ids += [i for i in (view.lost.low, view.lost.high) if i is not None]
    ids += [d.checkpoint_id for d in damage if d.checkpoint_id is not None]
    return ids if ids or not damage else None


def _decoded(name: str) -> str | None:
    try:
        return decode_name(name)
    except ValueError:
        return None

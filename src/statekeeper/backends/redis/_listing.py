"""How the Redis checkpointer lists across threads: the registry of threads (checked
against its count), the thread index (each thread's newest root checkpoint, newest
first: ``thread_heads``), the ``ids`` index of every thread merged newest first, read a
page at a time (how ``list(None)`` reads keys of a layout before the checkpoint index,
opened read-only: :mod:`._index.listing`); and the steps every listing shares (large
values fetched after a script, the first item of a stream).

Pure bookkeeping over sans-IO requests (:class:`~._io.Cmd`, :class:`~._io.Batch`): the
listing in :mod:`._reads` runs it with the sync or the asyncio client.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

from statekeeper.backends.redis import _lua as lua
from statekeeper.backends.redis._client import ordered, split_ordered, untag
from statekeeper.backends.redis._index.scripts import REGISTRY
from statekeeper.backends.redis._integrity.checked import Checked, log
from statekeeper.backends.redis._integrity.seal import (
    BACKEND,
    Bad,
    corrupt,
    damage,
    path,
    wrong_type,
)
from statekeeper.backends.redis._io import Batch, Cmd, Emit, Eval, Op, Stream
from statekeeper.backends.redis._layout import END, Layout, rank, swap
from statekeeper.checkpointers.heads import Head
from statekeeper.errors import Damage, StorageError

__all__ = [
    "PAGE",
    "SCAN",
    "Budget",
    "Merge",
    "Registry",
    "Source",
    "fill",
    "first_item",
    "is_tag",
    "read_roots",
    "root_head",
    "root_id",
    "span",
]

PAGE = 100  # checkpoints per listing script call (bounds each reply)
SCAN = 500  # registry entries, index members or hash fields per paging call


class Registry(Checked):
    """The registry of threads, as the reads and maintenance use it."""

    def _checked_registry(self) -> Op[list[str]]:
        """The registered threads, after checking the registry against its count."""
        yield from self._checked_count()
        threads: list[str] = yield from self.registered()
        return threads

    def _checked_count(self) -> Op[None]:
        """Check the registry against its count (O(1)): a member, or the whole key,
        deleted by something else shows. Raised, or logged (``on_corrupt="fallback"``)."""
        self._check_count((yield self._count_call()))

    def _count_call(self) -> Eval:
        """The call whose reply :meth:`_check_count` checks."""
        return Eval(REGISTRY, (self.registry, self.counter), ("check",))

    def _check_count(self, reply: list[Any]) -> None:
        members, count = reply
        if count is not None and int(count) != members:
            reason = (
                f"the registry of threads lists {members} threads where {int(count)} were "
                "registered (members or the whole key were deleted)"
            )
            self._skip(corrupt(Damage(reason, BACKEND, record="index", path=path(self.registry))))

    # -- the registry of threads ---------------------------------------------------------

    def registered(self, *, lenient: bool = False) -> Op[list[str]]:
        """Every registered thread (a thread put meanwhile may or may not be in it). A
        member that is no thread's tag is damage: raised, or skipped and logged
        (``on_corrupt="fallback"``, or ``lenient``: maintenance skips what it cannot
        visit)."""
        found: dict[bytes, None] = {}
        cursor = 0
        while True:
            cursor, entries = yield Cmd(("ZSCAN", self.registry, cursor, "COUNT", SCAN))
            found.update(dict.fromkeys(member for member, _ in entries))
            if cursor == 0:
                break
        threads = []
        for member in found:
            try:
                threads.append(untag(member))
            except ValueError:
                reason = "a member of the registry of threads is no thread's tag"
                where = path(self.registry, member)
                error = corrupt(Damage(reason, BACKEND, None, record="index", path=where))
                if not lenient:
                    self._skip(error)
                else:
                    log.warning("%s; skipped", error)
        return threads

    # -- the thread index ----------------------------------------------------------------

    def thread_heads(self, limit: int, after: Head | None) -> Op[list[Head]]:
        """A page of the thread index, newest first, after ``after``. Each entry is
        checked against its thread (one pipelined read per page): a thread that has no
        root checkpoint any more (expired, or deleted by a process killed before it
        updated the index) is left out; a member that cannot be read is left out too
        (``verify`` reports both, and ``verify(repair=True)`` rebuilds the index)."""
        top = b"+" if after is None else b"(" + _member(after.thread_id, after.checkpoint_id)
        found: list[Head] = []
        while len(found) < limit:
            want = limit - len(found)
            members = yield Cmd(("ZRANGE", self.heads, top, b"-", "BYLEX", "REV", "LIMIT", 0, want))
            heads = [head for head in map(_head, members) if head is not None]
            newest = yield from self.root_heads([head.thread_id for head in heads])
            found += [head for head, now in zip(heads, newest, strict=True) if now is not None]
            if len(members) < want:
                break
            top = b"(" + members[-1]
        return found

    def root_heads(self, threads: list[str]) -> Op[list[str | None]]:
        """The id of each thread's newest root checkpoint (``None``: it has none), read
        from its ``ns`` index: one pipelined batch (see :func:`read_roots`)."""
        return (yield from read_roots(self, threads))

    def reindex(self, threads: list[str], op: str) -> Op[None]:
        """Index these threads as their ``ns`` indexes say now (``op`` "max" or "set"),
        in batches; a thread without a root checkpoint is removed."""
        for start in range(0, len(threads), SCAN):
            chunk = threads[start : start + SCAN]
            newest = yield from self.root_heads(chunk)
            pairs = list(zip(chunk, newest, strict=True))
            there = [(t, n) for t, n in pairs if n]
            gone = [(t, n) for t, n in pairs if n is None]  # "": unreadable, left as it is
            yield Batch(tuple(self.index(o, p) for o, p in ((op, there), ("del", gone)) if p))


_ROOT = b"(" + END  # the root namespace's refs in ``ns``: E("") E(checkpoint id)...
_ROOT_END = b"(\x00\x02"  # ...which sort below every other namespace's


def read_roots(layout: Layout, threads: list[str]) -> Op[list[str | None]]:
    """The id of each thread's newest root checkpoint, from its ``ns`` index, in one
    pipelined batch: ``None`` when it has none, ``""`` (no checkpoint id) when its ``ns``
    key holds another type (damage, which the thread's own reads and ``verify`` report)."""
    if not threads:
        return []
    calls = tuple(root_head(layout.keys(t)) for t in threads)
    try:
        replies: list[Any] = yield Batch(calls)
    except StorageError as exc:
        if not wrong_type(exc):
            raise
        replies = []
        for call in calls:  # one at a time, to tell which
            try:
                replies.append((yield call))
            except StorageError as one:
                if not wrong_type(one):
                    raise
                replies.append(None)
    return ["" if reply is None else root_id(reply) for reply in replies]


def root_head(keys: tuple[bytes, ...]) -> Cmd:
    """Read a thread's newest root ref from its ``ns`` index (``keys``: the thread's)."""
    return Cmd(("ZRANGE", keys[1], _ROOT_END, _ROOT, "BYLEX", "REV", "LIMIT", 0, 1))


def root_id(members: list[bytes]) -> str | None:
    """The checkpoint id of a :func:`root_head` reply (``None``: no root checkpoint)."""
    try:
        return split_ordered(members[0])[1] if members else None
    except (UnicodeDecodeError, IndexError):  # a damaged member: verify reports it
        return None


def _member(thread_id: str, checkpoint_id: str) -> bytes:
    return ordered(checkpoint_id) + ordered(thread_id)


def _head(member: bytes) -> Head | None:
    """The head an index member names; ``None`` for a damaged one."""
    try:
        checkpoint_id, thread_id, rest = split_ordered(member)
    except (UnicodeDecodeError, ValueError):
        return None
    return Head(thread_id, checkpoint_id) if rest == "" else None


def is_tag(member: bytes) -> bool:
    """Whether a registry member is a thread's tag (else damage)."""
    try:
        untag(member)
    except ValueError:
        return False
    return True


@dataclass
class Source:
    thread_id: str
    keys: tuple[bytes, ...]
    buffer: list[bytes] = field(default_factory=list)  # ids members, newest first
    more: bool = True
    last: bytes | None = None


@dataclass
class Budget:
    """How many more checkpoints a listing may emit (``None``: no limit)."""

    remaining: int | None

    def page(self, filter: dict[str, Any] | None) -> int:
        """How many to ask for next: a full page when a filter may reject some or there is
        no limit, else no more than may still be emitted."""
        return PAGE if filter or self.remaining is None else min(self.remaining, PAGE)

    def spend(self) -> bool:
        """Count one emitted checkpoint; True when it was the last the limit allows."""
        if self.remaining is None:
            return False
        self.remaining -= 1
        return self.remaining == 0


@dataclass
class Merge:
    """The ``ids`` indexes of several threads merged newest first (:func:`rank`), each
    read ``page`` members at a time below ``top`` (``b"+"``: from the newest)."""

    sources: list[Source]
    top: bytes
    page: int
    heap: list[tuple[bytes, int, bytes]] = field(default_factory=list)  # rank, source, member

    def start(self) -> Op[None]:
        """Read the first page of every index, ``SCAN`` indexes per batch."""
        for start in range(0, len(self.sources), SCAN):
            chunk = range(start, min(start + SCAN, len(self.sources)))
            replies = yield Batch(tuple(self._fetch(self.sources[i]) for i in chunk))
            for i, members in zip(chunk, replies, strict=True):
                self._refill(self.sources[i], members)
                self._push(i)

    def take(self, want: int) -> Op[list[tuple[int, bytes]]]:
        """Up to ``want`` next members, newest first, as ``(source, ref)``; an index whose
        page runs out is read further before its next member is ranked."""
        group: list[tuple[int, bytes]] = []
        while self.heap and len(group) < want:
            _, index, member = heapq.heappop(self.heap)
            group.append((index, swap(member)))
            source = self.sources[index]
            if not source.buffer and source.more:
                self._refill(source, (yield self._fetch(source)))
            self._push(index)
        return group

    def _fetch(self, source: Source) -> Cmd:
        high = self.top if source.last is None else b"(" + source.last
        return Cmd(("ZRANGE", source.keys[0], high, b"-", "BYLEX", "REV", "LIMIT", 0, self.page))

    def _refill(self, source: Source, members: list[bytes]) -> None:
        for member in members:
            if member.count(END) != 2:  # not E(checkpoint id) E(ns): the merge needs both
                reason = "an ids member is not a checkpoint reference"
                keys = dict(zip(lua.THREAD_KEYS, source.keys, strict=True))
                raise corrupt(damage(Bad(reason, "index", "ids", member), keys, source.thread_id))
        source.buffer, source.more = list(members), len(members) == self.page
        if members:
            source.last = members[-1]

    def _push(self, index: int) -> None:
        source = self.sources[index]
        if source.buffer:
            member = source.buffer.pop(0)
            heapq.heappush(self.heap, (rank(member, source.thread_id), index, member))


def span(ns: str | None, checkpoint_id: str | None, below: str | None) -> tuple[str, bytes, bytes]:
    """The index (``"ns"`` or ``"ids"``) and the ``BYLEX`` range a listing of one thread
    walks: one namespace (below ``below``), else the checkpoints with one id in any
    namespace, else all of them below ``below``."""
    if ns is not None:
        high = b"(" + ordered(ns) + (ordered(below) if below is not None else b"\xff")
        return "ns", b"[" + ordered(ns), high
    if checkpoint_id is not None:
        return "ids", b"[" + ordered(checkpoint_id), b"(" + ordered(checkpoint_id) + b"\xff"
    return "ids", b"-", (b"(" + ordered(below) if below is not None else b"+")


def fill(groups: list[tuple[tuple[bytes, ...], list[list[Any]]]]) -> Op[bool]:
    """Replace the ``[field]`` links of value chains (large values, left out of the
    scripts) by the values: one HMGET per thread. False if a value is gone (deleted
    since the script ran): the caller reads again."""
    calls: list[Cmd | Eval] = []
    slots: list[tuple[list[Any], int, int]] = []  # (links, position, value index)
    offset = 0
    for keys, chains in groups:
        fields: dict[bytes, int] = {}  # each field once per HMGET
        for links in chains:
            for i, link in enumerate(links):
                if isinstance(link, list) and len(link) == 1:
                    slots.append((links, i, offset + fields.setdefault(link[0], len(fields))))
        if fields:
            calls.append(Cmd(("HMGET", keys[3], *fields)))
            offset += len(fields)
    if not calls:
        return True
    replies = yield Batch(tuple(calls))
    values = [value for reply in replies for value in reply]
    for links, i, index in slots:
        if values[index] is None:
            return False
        links[i] = values[index]
    return True


def first_item(stream: Stream) -> Op[Any]:
    """The first item ``stream`` emits (``None`` if none), as an operation."""
    reply: Any = None
    while True:
        try:
            call = stream.send(reply)
        except StopIteration:
            return None
        if isinstance(call, Emit):
            stream.close()
            return call.value
        reply = yield call

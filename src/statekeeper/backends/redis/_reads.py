"""The Redis checkpointer's reads, written once for its sync and async APIs.

Each operation is a generator that yields requests (:class:`~._io.Cmd`,
:class:`~._io.Eval`, :class:`~._io.Batch`) and gets their
replies back; :class:`~._io.Connection` runs it with the synchronous or
the asyncio client. Reads of one thread are one ``READ`` script call per page of
checkpoints (newest first, by ``ZRANGE ... BYLEX REV LIMIT``), plus one ``HMGET`` when
values too large to pass through Lua are due; ``list(None)`` merges the threads of the
registry.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, DeltaChannelHistory, PendingWrite
from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper._storage.lineage import assemble_history, walk_chains
from statekeeper.backends.redis import _lua as lua
from statekeeper.backends.redis._client import ordered
from statekeeper.backends.redis._integrity.records import Payloads
from statekeeper.backends.redis._integrity.seal import Bad
from statekeeper.backends.redis._io import Batch, Call, Cmd, Emit, Eval, Op, Stream
from statekeeper.backends.redis._layout import Item, pending, swap, unstable, value_chains
from statekeeper.backends.redis._listing import (
    PAGE,
    SCAN,
    Budget,
    Merge,
    Registry,
    Source,
    fill,
    first_item,
    span,
)
from statekeeper.checkpointers.base import TaskWrite
from statekeeper.checkpointers.semantics import (
    before_id,
    list_scope,
    location,
    matches,
)
from statekeeper.errors import ConfigurationError, CorruptCheckpointError

__all__ = ["Reads", "holds_value"]

WALK_STEPS = 256  # ancestors followed per script call
READ_ATTEMPTS = 5  # reads of a checkpoint whose large values vanished meanwhile


class Reads(Registry):
    """The reading operations. ``serde`` is passed to each call because LangGraph's
    ``with_allowlist`` clones a saver with another serializer."""

    def _read(
        self,
        thread_id: str,
        keys: tuple[bytes, ...],
        what: str,
        *mode: Any,
        known: Sequence[bytes] = (),
        refresh: bool = True,
    ) -> Op[list[Item]]:
        """One READ script call (see its ARGV), its thread-wide checks passed; with
        ``"f"``, the large values fetched too. Consistent: read again if a checkpoint
        changed in between. Restarts the thread's TTL with ``refresh_on_read`` (never
        read-only)."""
        refresh = refresh and self.refresh_on_read and not self.read_only
        ttl = self.ttl_ms if refresh else -1
        call = Eval(lua.READ, keys, (ttl, what, len(known) // 2, *known, *mode))
        for _ in range(READ_ATTEMPTS):
            if refresh:
                _, reply = yield Batch((self.touch(thread_id, only_existing=True), call))
            else:
                reply = yield call
            items = self._checked(thread_id, reply)
            if what != "f" or (yield from fill([(keys, value_chains(items))])):
                return items
        raise unstable()

    def get_tuple(
        self, serde: SerializerProtocol, config: RunnableConfig
    ) -> Op[CheckpointTuple | None]:
        thread_id, ns, checkpoint_id = location(config)
        keys = self.keys(thread_id)
        ens = ordered(ns)
        known, data = self.written.known(thread_id, ns)
        if checkpoint_id is None:
            low, high = b"[" + ens, b"(" + ens + b"\xff"
            mode: tuple[Any, ...] = ("ns", low, high, 1)
        else:
            mode = ("refs", ens + ordered(checkpoint_id))
        items = yield from self._read(thread_id, keys, "f", *mode, known=known)
        if not items:
            return None
        try:
            return self._load_item(serde, thread_id, items[0], Payloads(data))
        except CorruptCheckpointError as exc:
            if checkpoint_id is not None:  # asked for by id: that one, or an error
                raise
            self._skip(exc)
        # on_corrupt="fallback": the newest intact checkpoint older than the damaged one
        scope = ("ns", b"[" + ens, b"(" + items[0][0])
        older = self._list_thread(serde, thread_id, ns, scope, None, Budget(1))
        found: CheckpointTuple | None = yield from first_item(older)
        return found

    def writes(self, serde: SerializerProtocol, config: RunnableConfig) -> Op[list[TaskWrite]]:
        """The pending writes of the checkpoint ``config`` names, as ``get_tuple`` orders
        them, with their task paths; ``[]`` for an unknown checkpoint. One script call."""
        thread_id, ns, checkpoint_id = location(config)
        if checkpoint_id is None:
            raise ConfigurationError("get_writes needs a checkpoint_id in the config")
        ref = ordered(ns) + ordered(checkpoint_id)
        items = yield from self._read(thread_id, self.keys(thread_id), "w", "refs", ref)
        return self._task_writes(serde, thread_id, items[0]) if items else []

    def listing(
        self,
        serde: SerializerProtocol,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Stream:
        """Checkpoints newest first (ties: thread id, then namespace, descending)."""
        if limit is not None and limit <= 0:
            return
        thread_id, ns, checkpoint_id = list_scope(config)
        below = before_id(before)
        if checkpoint_id is not None and below is not None and not checkpoint_id < below:
            return
        if thread_id is None:
            yield from self._list_all(serde, filter, below, limit)
        elif ns is not None and checkpoint_id is not None:
            yield from self._list_one(serde, thread_id, ns, checkpoint_id, filter)
        else:
            scope = span(ns, checkpoint_id, below)
            yield from self._list_thread(serde, thread_id, ns, scope, filter, Budget(limit))

    def _list_one(
        self,
        serde: SerializerProtocol,
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        filter: dict[str, Any] | None,
    ) -> Stream:
        """The one checkpoint a thread, namespace and id name, if it matches: one script."""
        known, data = self.written.known(thread_id, ns)
        ref = ordered(ns) + ordered(checkpoint_id)
        keys = self.keys(thread_id)
        items = yield from self._read(thread_id, keys, "f", "refs", ref, known=known)
        for item in items:  # asked for by id: that one, or an error
            if item[1] and not self._matches(thread_id, item, filter):
                continue
            tup = self._load_item(serde, thread_id, item, Payloads(data))
            if tup is not None:
                yield Emit(tup)

    def _list_thread(
        self,
        serde: SerializerProtocol,
        thread_id: str,
        ns: str | None,
        span: tuple[str, bytes, bytes],
        filter: dict[str, Any] | None,
        budget: Budget,
    ) -> Stream:
        """One thread's checkpoints in ``span`` (see :func:`_span`), newest first: one
        READ per page; with a filter, pages of records, then the matches in full."""
        keys = self.keys(thread_id)
        known, data = self.written.known(thread_id, ns)
        mode, low, high = span
        while True:
            size = budget.page(filter)
            what = "r" if filter else "f"
            items = yield from self._read(
                thread_id, keys, what, mode, low, high, size, known=() if filter else known
            )
            found = yield from self._matching(thread_id, keys, items, filter, known)
            if (yield from self._emit_page(serde, (thread_id, keys), found, (known, data), budget)):
                return
            if len(items) < size:
                return
            last = items[-1][0]
            high = b"(" + (swap(last) if mode == "ids" else last)

    def _emit_page(
        self,
        serde: SerializerProtocol,
        thread: tuple[str, tuple[bytes, ...]],
        found: list[Item],
        memory: tuple[Sequence[bytes], dict[bytes, bytes]],
        budget: Budget,
    ) -> Generator[Call | Emit, Any, bool]:
        """Emit the checkpoints of one READ reply's items; True once ``budget`` is spent.
        A damaged one skipped (``on_corrupt="fallback"``), the rest are read again: the
        reply sent each value once, with the first item that needed it."""
        thread_id, keys = thread
        known, data = memory
        payloads = Payloads(data)  # one per READ reply
        queue = list(found)
        while queue:
            item = queue.pop(0)
            try:
                tup = self._load_item(serde, thread_id, item, payloads)
            except CorruptCheckpointError as exc:
                self._skip(exc)
                if queue:
                    refs = [later[0] for later in queue]
                    queue = yield from self._read(thread_id, keys, "f", "refs", *refs, known=known)
                    payloads = Payloads(data)
                continue
            if tup is not None:
                yield Emit(tup)
                if budget.spend():
                    return True
        return False

    def _matching(
        self,
        thread_id: str,
        keys: tuple[bytes, ...],
        items: list[Item],
        filter: dict[str, Any] | None,
        known: Sequence[bytes],
    ) -> Op[list[Item]]:
        """The items of a page that exist (or should: damaged) and match ``filter``. With
        a filter the page holds records only, so the matches are read again in full (one
        READ); a damaged record is skipped (``on_corrupt="fallback"``) or raised."""
        if not filter:
            return items
        found = []
        for item in items:
            try:
                if item[1] and self._matches(thread_id, item, filter):
                    found.append(item)
                elif item[4]:
                    found.append(item)  # listed but missing: loading it reports it
            except CorruptCheckpointError as exc:
                self._skip(exc)
        if found:
            refs = [item[0] for item in found]
            found = yield from self._read(thread_id, keys, "f", "refs", *refs, known=known)
        return found

    def _list_all(
        self,
        serde: SerializerProtocol,
        filter: dict[str, Any] | None,
        below: str | None,
        limit: int | None,
    ) -> Stream:
        """``list(None)``: a k-way merge of every registered thread's newest-first index,
        the registry's count and every thread's indexes checked first (a merge of
        damaged indexes would leave checkpoints out unnoticed)."""
        yield from self.sweep()
        threads = yield from self._checked_registry()
        sources = [Source(thread_id, self.keys(thread_id)) for thread_id in threads]
        for start in range(0, len(sources), SCAN):
            chunk = sources[start : start + SCAN]
            checks = tuple(Eval(lua.READ, s.keys, (-1, "r", 0, "refs")) for s in chunk)
            for source, reply in zip(chunk, (yield Batch(checks)), strict=True):
                self._checked(source.thread_id, reply)
        top = b"(" + ordered(below) if below is not None else b"+"
        budget = Budget(limit)
        merge = Merge(sources, top, page=budget.page(filter))
        yield from merge.start()
        while merge.heap:
            group = yield from merge.take(budget.page(filter))
            for tup in (yield from self._load_group(serde, sources, group, filter)):
                yield Emit(tup)
                if budget.spend():
                    return

    def _load_group(
        self,
        serde: SerializerProtocol,
        sources: list[Source],
        group: list[tuple[int, bytes]],
        filter: dict[str, Any] | None,
    ) -> Op[list[CheckpointTuple]]:
        """Load checkpoints of several threads (one script per thread), in ``group``'s
        order; with a filter, records first and everything only for those that match.
        A checkpoint deleted since the index was read is left out; a damaged one raises
        (or is skipped and logged, ``on_corrupt="fallback"``)."""
        wanted: dict[int, list[bytes]] = {}
        for index, ref in group:
            wanted.setdefault(index, []).append(ref)
        if filter:
            order = list(wanted)
            replies = yield Batch(
                tuple(
                    Eval(lua.READ, sources[i].keys, (-1, "r", 0, "refs", *wanted[i])) for i in order
                )
            )
            wanted = {}
            for i, reply in zip(order, replies, strict=True):
                thread_id = sources[i].thread_id
                for item in self._checked(thread_id, reply):
                    try:
                        if item[4] or (item[1] and self._matches(thread_id, item, filter)):
                            wanted.setdefault(i, []).append(item[0])
                    except CorruptCheckpointError as exc:
                        self._skip(exc)
        loaded = yield from self._load_refs(sources, wanted)
        found = []
        payloads = {index: Payloads() for index in wanted}  # one per READ reply
        dirty: set[int] = set()  # threads whose reply lost a damaged item's values
        for index, ref in group:
            if (index, ref) not in loaded:
                continue
            if index in dirty:  # it may lean on them: read it alone
                loaded.update((yield from self._load_refs(sources, {index: [ref]})))
                payloads[index] = Payloads()
            try:
                item = loaded[(index, ref)]
                tup = self._load_item(serde, sources[index].thread_id, item, payloads[index])
            except CorruptCheckpointError as exc:
                self._skip(exc)
                dirty.add(index)
                continue
            if tup is not None:
                found.append(tup)
        return found

    def _load_refs(
        self, sources: list[Source], wanted: dict[int, list[bytes]]
    ) -> Op[dict[tuple[int, bytes], Item]]:
        """The READ items (in full) of these refs of several threads, by (source, ref)."""
        order = list(wanted)
        calls = tuple(
            Eval(lua.READ, sources[i].keys, (-1, "f", 0, "refs", *wanted[i])) for i in order
        )
        for _ in range(READ_ATTEMPTS):
            if not calls:
                return {}
            replies = yield Batch(calls)
            checked = [
                self._checked(sources[i].thread_id, reply)
                for i, reply in zip(order, replies, strict=True)
            ]
            chains = [
                (sources[i].keys, value_chains(items))
                for i, items in zip(order, checked, strict=True)
            ]
            if (yield from fill(chains)):
                return {
                    (i, item[0]): item
                    for i, items in zip(order, checked, strict=True)
                    for item in items
                }
        raise unstable()

    def _matches(self, thread_id: str, item: Item, filter: dict[str, Any] | None) -> bool:
        return not filter or matches(self._record(thread_id, item).metadata, filter)

    # -- DeltaChannel support ------------------------------------------------------------

    def _walk(
        self, thread_id: str, ns: str, checkpoint_id: str, channels: Sequence[str]
    ) -> Op[list[tuple[str, dict[str, bytes | None]]]]:
        """Ancestors of a checkpoint, nearest first, with the value field of each channel
        they hold a value for, as far as the walk for ``channels`` needs them."""
        keys = self.keys(thread_id)
        ens = ordered(ns)
        ancestors: list[tuple[str, dict[str, bytes | None]]] = []
        seen = {checkpoint_id}
        wanted = list(channels)
        start = checkpoint_id
        while wanted:
            prefixes = [ens + ordered(ch) for ch in wanted]
            steps = yield Eval(lua.WALK, keys[2:5], (ens, start, WALK_STEPS, *prefixes))
            for parent, hits in steps:
                try:
                    ancestor = parent.decode()
                except ValueError:  # the script read it from a header it could parse
                    bad = Bad("a record names a parent id that is no text", "checkpoint", "cp")
                    raise self._corrupt(thread_id, bad, ns, start) from None
                ancestors.append((ancestor, dict(zip(wanted, hits, strict=True))))
                if ancestor in seen:
                    return ancestors  # a cycle: walk_chains stops here
                seen.add(ancestor)
            if len(steps) < WALK_STEPS:
                return ancestors
            held = {ch for _, hits in ancestors for ch, hit in hits.items() if hit}
            wanted = [ch for ch in wanted if ch not in held]
            start = ancestors[-1][0]
        return ancestors

    def delta_history(
        self, serde: SerializerProtocol, config: RunnableConfig, channels: Sequence[str]
    ) -> Op[Mapping[str, DeltaChannelHistory]]:
        if not channels:
            return {}
        thread_id, ns, checkpoint_id = location(config)
        keys = self.keys(thread_id)
        ens = ordered(ns)
        if checkpoint_id is None:
            latest = ("ns", b"[" + ens, b"(" + ens + b"\xff", 1)
            items = yield from self._read(thread_id, keys, "r", *latest, refresh=False)
            checkpoint_id = self._place(thread_id, items[0][0])[1] if items else None
        chains: dict[str, list[str]] = {ch: [] for ch in channels}
        seed_fields: dict[str, bytes | None] = {}
        if checkpoint_id is not None:
            ancestors = yield from self._walk(thread_id, ns, checkpoint_id, channels)
            chains, seed_fields = walk_chains(checkpoint_id, ancestors, channels, holds_value)
        chain_ids = list(dict.fromkeys(a for chain in chains.values() for a in chain))
        seeds = [f for f in seed_fields.values() if f is not None]
        calls: list[Cmd | Eval] = [
            Eval(lua.READ, keys, (-1, "w", 0, "refs", *(ens + ordered(a) for a in chunk)))
            for chunk in _chunks(chain_ids, PAGE)
        ]
        if seeds:
            calls.append(Eval(lua.CHAINS, keys, tuple(seeds)))
        for _ in range(READ_ATTEMPTS):
            replies = (yield Batch(tuple(calls))) if calls else []
            if not seeds or (yield from fill([(keys, replies[-1])])):
                break
        else:
            raise unstable()
        writes: dict[str, Item] = {}
        for reply in replies[: len(calls) - bool(seeds)]:
            for item in self._checked(thread_id, reply):
                writes[self._place(thread_id, item[0])[1]] = item
        seed_chains = dict(zip(seeds, replies[-1], strict=True)) if seeds else {}
        place = (thread_id, ns, checkpoint_id)
        decoded = self._seeds(serde, place, seed_fields, seed_chains)

        def writes_of(cid: str, ch: str) -> list[PendingWrite]:
            item = writes.get(cid)
            return pending(self._task_writes(serde, thread_id, item, ch)) if item else []

        return assemble_history(channels, chains, decoded, writes_of)

    def _seeds(
        self,
        serde: SerializerProtocol,
        place: tuple[str, str, str | None],
        seed_fields: Mapping[str, bytes | None],
        seed_chains: Mapping[bytes, list[Any]],
    ) -> dict[str, Any]:
        """The decoded seed of each channel that has one (``place``: thread, namespace
        and checkpoint the history is of, for damage reports)."""
        decoded = {}
        payloads = Payloads()
        for ch, seed_field in seed_fields.items():
            links = seed_chains.get(seed_field) if seed_field is not None else None
            if seed_field is not None and links:
                try:
                    decoded[ch] = payloads.value(serde, seed_field, links)
                except Bad as bad:
                    raise self._corrupt(place[0], bad, place[1], place[2]) from None
        return decoded


def holds_value(channel: str, value_field: bytes | None) -> bool:
    return value_field is not None


def _chunks(items: list[str], size: int) -> Iterable[list[str]]:
    return (items[i : i + size] for i in range(0, len(items), size))

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

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, CheckpointTuple, DeltaChannelHistory
from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper._storage.lineage import assemble_history, walk_chains
from statekeeper._storage.payload import decode
from statekeeper.backends.redis import _lua as lua
from statekeeper.backends.redis._client import ordered, split_ordered, untag
from statekeeper.backends.redis._io import Batch, Cmd, Emit, Eval, Op, Stream
from statekeeper.backends.redis._layout import (
    Item,
    Layout,
    Payloads,
    Record,
    decode_writes,
    pending,
    swap,
    unstable,
    value_chains,
)
from statekeeper.backends.redis._listing import PAGE, SCAN, Budget, Merge, Source, span
from statekeeper.checkpointers.base import TaskWrite
from statekeeper.checkpointers.semantics import (
    before_id,
    checkpoint_config,
    list_scope,
    location,
    matches,
)
from statekeeper.errors import ConfigurationError

__all__ = ["Reads", "holds_value"]

WALK_STEPS = 256  # ancestors followed per script call
READ_ATTEMPTS = 5  # reads of a checkpoint whose large values vanished meanwhile


class Reads(Layout):
    """The reading operations. ``serde`` is passed to each call because LangGraph's
    ``with_allowlist`` clones a saver with another serializer."""

    def _read(
        self,
        thread_id: str,
        keys: tuple[bytes, ...],
        what: str,
        *mode: Any,
        known: Sequence[bytes] = (),
    ) -> Op[list[Item]]:
        """One READ script call (see its ARGV); with ``"f"``, the large values fetched
        too. Consistent: read again if a checkpoint changed in between."""
        refresh = self.ttl_ms if self.refresh_on_read else -1
        call = Eval(lua.READ, keys, (refresh, what, len(known) // 2, *known, *mode))
        for _ in range(READ_ATTEMPTS):
            if self.refresh_on_read:
                _, items = yield Batch((self.touch(thread_id, only_existing=True), call))
            else:
                items = yield call
            if what != "f" or (yield from self._fill([(keys, value_chains(items))])):
                return items  # type: ignore[no-any-return]
        raise unstable()

    @staticmethod
    def _fill(groups: list[tuple[tuple[bytes, ...], list[list[Any]]]]) -> Op[bool]:
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
        if not items or not items[0][1]:
            return None
        return self._tuple(serde, thread_id, items[0], Payloads(data))

    def writes(self, serde: SerializerProtocol, config: RunnableConfig) -> Op[list[TaskWrite]]:
        """The pending writes of the checkpoint ``config`` names, as ``get_tuple`` orders
        them, with their task paths; ``[]`` for an unknown checkpoint. One script call."""
        thread_id, ns, checkpoint_id = location(config)
        if checkpoint_id is None:
            raise ConfigurationError("get_writes needs a checkpoint_id in the config")
        ref = ordered(ns) + ordered(checkpoint_id)
        items = yield from self._read(thread_id, self.keys(thread_id), "w", "refs", ref)
        return decode_writes(serde, items[0][3]) if items else []

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
        for item in items:
            if item[1] and self._matches(item, filter):
                yield Emit(self._tuple(serde, thread_id, item, Payloads(data)))

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
            payloads = Payloads(data)  # one per READ reply: it sends each value once
            for item in found:
                if item[1]:
                    yield Emit(self._tuple(serde, thread_id, item, payloads))
                    if budget.spend():
                        return
            if len(items) < size:
                return
            last = items[-1][0]
            high = b"(" + (swap(last) if mode == "ids" else last)

    def _matching(
        self,
        thread_id: str,
        keys: tuple[bytes, ...],
        items: list[Item],
        filter: dict[str, Any] | None,
        known: Sequence[bytes],
    ) -> Op[list[Item]]:
        """The items of a page that exist and match ``filter``. With a filter the page
        holds records only, so the matches are read again in full (one READ)."""
        found = [item for item in items if item[1] and self._matches(item, filter)]
        if filter and found:
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
        """``list(None)``: a k-way merge of every registered thread's newest-first index."""
        yield from self.sweep()
        tags = yield from self.registered()
        sources = [Source(untag(t), self.keys(untag(t))) for t in tags]
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
        order; with a filter, records first and everything only for those that match."""
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
            for i, items in zip(order, replies, strict=True):
                for item in items:
                    if item[1] and self._matches(item, filter):
                        wanted.setdefault(i, []).append(item[0])
        loaded: dict[tuple[int, bytes], Item] = {}
        order = list(wanted)
        calls = tuple(
            Eval(lua.READ, sources[i].keys, (-1, "f", 0, "refs", *wanted[i])) for i in order
        )
        for attempt in range(READ_ATTEMPTS + 1):
            if not calls:
                break
            if attempt == READ_ATTEMPTS:
                raise unstable()
            replies = yield Batch(calls)
            chains = [
                (sources[i].keys, value_chains(items))
                for i, items in zip(order, replies, strict=True)
            ]
            if (yield from self._fill(chains)):
                for i, items in zip(order, replies, strict=True):
                    loaded.update({(i, item[0]): item for item in items if item[1]})
                break
        payloads = {index: Payloads() for index in order}  # one per READ reply
        return [
            self._tuple(serde, sources[index].thread_id, loaded[(index, ref)], payloads[index])
            for index, ref in group
            if (index, ref) in loaded
        ]

    @staticmethod
    def _matches(item: Item, filter: dict[str, Any] | None) -> bool:
        return not filter or matches(Record.parse(item[1]).metadata, filter)

    def _tuple(
        self, serde: SerializerProtocol, thread_id: str, item: Item, payloads: Payloads
    ) -> CheckpointTuple:
        ref, data, values, write_pairs = item
        ns, checkpoint_id, _ = split_ordered(ref)
        record = Record.parse(data)
        checkpoint: Checkpoint = decode(serde, record.type, record.codec, record.checkpoint)
        channel_values = {}
        for value_field, links in zip(record.fields[: record.nload], values, strict=False):
            if links and links[0]:  # not missing, nor b"" for a version without a value
                channel = split_ordered(value_field)[1]
                channel_values[channel] = payloads.value(serde, value_field, links)
        checkpoint["channel_values"] = channel_values
        return CheckpointTuple(
            config=checkpoint_config(thread_id, ns, checkpoint_id),
            checkpoint=checkpoint,
            metadata=record.metadata,  # type: ignore[arg-type]
            parent_config=(
                checkpoint_config(thread_id, ns, record.parent) if record.parent else None
            ),
            pending_writes=pending(decode_writes(serde, write_pairs)),
        )

    # -- DeltaChannel support ------------------------------------------------------------

    def _walk(
        self, keys: tuple[bytes, ...], ns: str, checkpoint_id: str, channels: Sequence[str]
    ) -> Op[list[tuple[str, dict[str, bytes | None]]]]:
        """Ancestors of a checkpoint, nearest first, with the value field of each channel
        they hold a value for, as far as the walk for ``channels`` needs them."""
        ens = ordered(ns)
        ancestors: list[tuple[str, dict[str, bytes | None]]] = []
        seen = {checkpoint_id}
        wanted = list(channels)
        start = checkpoint_id
        while wanted:
            prefixes = [ens + ordered(ch) for ch in wanted]
            steps = yield Eval(lua.WALK, keys[2:4], (ens, start, WALK_STEPS, *prefixes))
            for parent, hits in steps:
                ancestor = parent.decode()
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
            items = yield Eval(lua.READ, keys, (-1, "r", 0, *latest))
            checkpoint_id = split_ordered(items[0][0])[1] if items else None
        chains: dict[str, list[str]] = {ch: [] for ch in channels}
        seed_fields: dict[str, bytes | None] = {}
        if checkpoint_id is not None:
            ancestors = yield from self._walk(keys, ns, checkpoint_id, channels)
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
            if not seeds or (yield from self._fill([(keys, replies[-1])])):
                break
        else:
            raise unstable()
        writes: dict[str, list[bytes | None]] = {}
        for items in replies[: len(calls) - bool(seeds)]:
            for item in items:
                writes[split_ordered(item[0])[1]] = item[3]
        seed_chains = dict(zip(seeds, replies[-1], strict=True)) if seeds else {}
        decoded = {}
        payloads = Payloads()
        for ch, seed_field in seed_fields.items():
            links = seed_chains.get(seed_field) if seed_field is not None else None
            if seed_field is not None and links and links[0]:
                decoded[ch] = payloads.value(serde, seed_field, links)
        return assemble_history(
            channels,
            chains,
            decoded,
            lambda cid, ch: pending(decode_writes(serde, writes.get(cid, []), ch)),
        )

    # -- the registry of threads ---------------------------------------------------------

    def registered(self) -> Op[list[bytes]]:
        """Every registered thread tag (a thread put meanwhile may or may not be in it)."""
        found: dict[bytes, None] = {}
        cursor = 0
        while True:
            cursor, entries = yield Cmd(("ZSCAN", self.registry, cursor, "COUNT", SCAN))
            found.update(dict.fromkeys(member for member, _ in entries))
            if cursor == 0:
                return list(found)

    def sweep(self) -> Op[None]:
        """Drop registry entries of threads whose keys have all expired (bounded work)."""
        now = f"{time.time() * 1000:.0f}"
        flat = yield Eval(lua.EXPIRED, (self.registry,), (now, SCAN))
        pairs = list(zip(flat[::2], flat[1::2], strict=True))
        if not pairs:
            return
        exists = yield Batch(tuple(Cmd(("EXISTS", *self.keys(untag(m)))) for m, _ in pairs))
        gone = [x for (m, s), n in zip(pairs, exists, strict=True) if not n for x in (m, s)]
        if gone:
            yield Eval(lua.REMOVE_IF, (self.registry,), tuple(gone))


def holds_value(channel: str, value_field: bytes | None) -> bool:
    return value_field is not None


def _chunks(items: list[str], size: int) -> Iterable[list[str]]:
    return (items[i : i + size] for i in range(0, len(items), size))

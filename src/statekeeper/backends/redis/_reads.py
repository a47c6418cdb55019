"""The Redis checkpointer's reads, written once for its sync and async APIs.

Each operation is a generator that yields requests (:class:`~._io.Cmd`,
:class:`~._io.Eval`, :class:`~._io.Batch`) and gets their
replies back; :class:`~._io.Connection` runs it with the synchronous or
the asyncio client. Reads of one thread are one ``READ`` script call per page of
checkpoints (newest first, by ``ZRANGE ... BYLEX REV LIMIT``), plus one ``HMGET`` when
values too large to pass through Lua are due; ``list(None)``, and filters on declared
metadata keys, read through the indexes across threads (:mod:`._index.listing`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, DeltaChannelHistory, PendingWrite
from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper._storage.lineage import assemble_history, walk_chains
from statekeeper.backends.redis import _lua as lua
from statekeeper.backends.redis._client import ordered
from statekeeper.backends.redis._index.listing import READ_ATTEMPTS, Listings
from statekeeper.backends.redis._integrity.records import Payloads
from statekeeper.backends.redis._integrity.seal import Bad
from statekeeper.backends.redis._io import Batch, Cmd, Emit, Eval, Op, Stream
from statekeeper.backends.redis._layout import Item, pending, swap, unstable
from statekeeper.backends.redis._listing import PAGE, Budget, fill, first_item, span
from statekeeper.checkpointers.base import TaskWrite
from statekeeper.checkpointers.semantics import before_id, list_scope, location
from statekeeper.errors import ConfigurationError, CorruptCheckpointError

__all__ = ["Reads", "holds_value"]

WALK_STEPS = 256  # ancestors followed per script call


class Reads(Listings):
    """The reading operations. ``serde`` is passed to each call because LangGraph's
    ``with_allowlist`` clones a saver with another serializer."""

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
        elif filter and (chosen := (yield from self._chosen(filter))):
            place = (thread_id, ns, checkpoint_id, below)
            yield from self._list_thread_by(serde, place, filter, chosen, Budget(limit))
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

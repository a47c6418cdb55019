"""The Redis checkpointer's writes and thread maintenance, written once for both APIs
(see :mod:`statekeeper.backends.redis._reads` for how operations run).

Each ``put`` and ``put_writes`` is one script (plus, in a Cluster, the registry update
before it). Maintenance works in bounded batches whatever a thread's size: deleting a
thread unlinks its keys, ``prune`` and ``delete_for_runs`` delete a batch of checkpoints per
script call, and ``copy_thread`` copies page by page into staging keys that one last
script renames onto the target all at once, if the source's change stamp (see
:mod:`statekeeper.backends.redis._lua`) shows that nothing changed it meanwhile.

The indexes across threads (:mod:`statekeeper.backends.redis._index`) gain a put's
entries in its script (standalone) or just before it (Cluster), a copy's before it is
published; deletions remove entries after the data, a page at a time.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper._storage.deltas import PlannedValue, ValuePlanner
from statekeeper._storage.lineage import delta_channels, keep_latest_ids, walk_chains
from statekeeper.backends.redis import _lua as lua
from statekeeper.backends.redis._client import ordered
from statekeeper.backends.redis._client import tag as tag_of
from statekeeper.backends.redis._index.members import Declared, Entry, Index
from statekeeper.backends.redis._index.scripts import ENTER
from statekeeper.backends.redis._index.upkeep import metadata_of
from statekeeper.backends.redis._integrity.records import Record, encode_value, encode_write
from statekeeper.backends.redis._integrity.seal import (
    KINDS,
    Bad,
    damaged_reply,
    wrong_type,
    wrong_types,
)
from statekeeper.backends.redis._io import Batch, Cmd, Eval, Op
from statekeeper.backends.redis._layout import END, first, swap
from statekeeper.backends.redis._listing import PAGE, SCAN
from statekeeper.backends.redis._reads import Reads, holds_value
from statekeeper.checkpointers.records import PreparedPut, PreparedWrites
from statekeeper.errors import StorageError, ThreadExistsError

__all__ = ["Plans"]

DELETE_BATCH = 100  # checkpoints deleted per script call
COPY_TTL_MS = 3_600_000  # a staged copy left by a crashed process expires after an hour
COPY_ATTEMPTS = 5  # copies of a source that changed while it was read, before giving up
PLAN_ATTEMPTS = 10  # plans of a put or a copy's entries while metadata keys get declared
_STAGE_ORDER = ("ids", "ns", "runs", "wix", "cp", "refs", "writes", "blobs")
_ZSETS = {"ids", "ns", "runs", "wix"}


class Plans(Reads):
    """Every operation of one checkpointer: the reads, and the writes below."""

    def __init__(
        self, prefix: str, ttl_ms: int, refresh_on_read: bool, compress: bool, cluster: bool
    ) -> None:
        super().__init__(prefix, ttl_ms, refresh_on_read, compress, cluster)
        # plans the values of a put against this process' last writes (also read's cache)
        self.values = ValuePlanner(self.written.recent, compress)

    def explain(self, exc: StorageError, threads: Sequence[str] | None) -> Op[None]:
        """Raise the CorruptCheckpointError that ``exc``, the error of an operation on
        ``threads`` (``None``: on any registered thread), stands for: a WRONGTYPE reply (a
        key of theirs, or the registry, overwritten by another program: found by asking
        each key's type), or a script's report of a record it could not read. Return if
        it stands for neither."""
        if wrong_type(exc):
            yield from self._explain(exc, threads)
        elif (where := damaged_reply(exc)) is not None and threads:
            name, field = where
            bad = Bad("its header cannot be read", KINDS.get(name, "index"), name, field)
            raise self._corrupt(threads[0], bad) from exc

    def _explain(self, exc: StorageError, threads: Sequence[str] | None) -> Op[None]:
        """Raise the CorruptCheckpointError of the key a WRONGTYPE reply (``exc``) met."""
        registry: bytes | None = self.registry
        found = yield from self.wrong_slot_types()  # the indexes in the registry's slot
        if found is not None:
            raise found from exc
        if threads is None:
            found = yield from wrong_types([], self.registry)
            if found is not None:
                raise found from exc
            threads, registry = (yield from self.registered(lenient=True)), None
        for start in range(0, len(threads), DELETE_BATCH):
            chunk = [(t, self.keys(t)) for t in threads[start : start + DELETE_BATCH]]
            found = yield from wrong_types(chunk, registry)
            if found is not None:
                raise found from exc
            registry = None

    def _write(self, script: Any, thread_id: str, ttl: int, *args: Any) -> Op[Any]:
        """Run a write script that registers the thread: in the script on a standalone
        server, just before it in a Cluster (the registry is in another slot there)."""
        keys = self.keys(thread_id)
        if not self.cluster:
            extra = (self.score(), self.tag(thread_id))
            registry = (self.registry, self.counter)
            return (yield Eval(script, (*keys, *registry), (ttl, *extra, *args)))
        *_, reply = yield Batch((self.touch(thread_id), Eval(script, keys, (ttl, "", "", *args))))
        return reply

    def _put(
        self,
        thread_id: str,
        args: Sequence[Any],
        root: str | None,
        plan: tuple[bytes, list[tuple[Index, Entry]]],
    ) -> Op[Any]:
        """Run a ``PUT`` (``args``: ref, record, run, then the values): on a standalone
        server it also registers the thread, updates the thread index with ``root`` (the
        id of the root checkpoint it stores, else ``None``) and adds the index entries
        ``plan`` holds (planned for its generation of the declared keys); in a Cluster
        the ``ENTER`` script does that in the registry's slot just before, so an entry is
        never missing for a stored checkpoint. The reply is ``b"indexes"`` (nothing
        written) if a metadata key was declared since the plan."""
        keys = self.keys(thread_id)
        generation, entries = plan
        sets = [key for index, _ in entries for key in (index.order, index.by_thread)]
        members = [m for _, entry in entries for m in (entry.order, entry.by_thread)]
        field = ordered(thread_id)
        head = ordered(root) + field if root is not None else b""
        ref, record, run, *values = args
        if not self.cluster:
            slot = (self.registry, self.counter, self.heads, self.head_of, self.across.indexed)
            argv = (self.score(), self.tag(thread_id), ref, record, run, head, field, generation)
            call = (*argv, len(members), *members, *values)
            return (yield Eval(lua.PUT, (*keys, *slot, *sets), (self.ttl_ms, *call)))
        slot = (self.registry, self.counter, self.heads, self.head_of, self.across.indexed)
        enter = (self.score(), self.tag(thread_id), field, head, generation, *members)
        if (yield Eval(ENTER, (*slot, *sets), enter)) != 1:
            return b"indexes"
        call = (self.ttl_ms, "", "", ref, record, run, b"", b"", b"", 0, *values)
        return (yield Eval(lua.PUT, keys, call))

    def _plan(self, prepared: PreparedPut, ref: bytes) -> tuple[bytes, list[tuple[Index, Entry]]]:
        """The index entries of a checkpoint about to be put, for the declared keys as
        this process last read them (with their generation: a put planned for an older
        one is refused, and planned again). The metadata is read back from its canonical
        JSON, as every reader of the index reads it."""
        declared: Declared = self.declared
        keys = list(declared.keys)
        metadata = None
        if any(key in prepared.metadata for key in keys):
            metadata = json.loads(prepared.metadata_json)
        return declared.generation, self.entries(prepared.thread_id, ref, metadata, keys)

    def put(self, serde: SerializerProtocol, prepared: PreparedPut) -> Op[None]:
        """Store a prepared checkpoint and its new values with one ``PUT`` script; the
        values are serialised (and append deltas planned) before it is sent."""
        prepared = prepared.packed()
        thread_id, ns = prepared.thread_id, prepared.checkpoint_ns
        ens = ordered(ns)
        value_field = self.value_field
        load = [value_field(ns, ens, ch, v) for ch, v in prepared.channel_versions.items()]
        blobs: list[bytes] = []  # per value: field, value, base field, base crc, crc
        planned: dict[int, tuple[tuple[str, str, str], PlannedValue]] = {}
        plan_value, values = self.values.plan, prepared.values
        for channel, version, version_key in prepared.new_versions:
            value_args = [value_field(ns, ens, channel, version), b"", b"", b"", b""]  # no value
            if channel in values:
                key = (thread_id, ns, channel)
                plan = plan_value(serde, key, channel, version_key, values[channel])
                value_args[1] = encode_value(value_args[0], ens, plan.stored)
                if plan.stored.base is not None:
                    value_args[2] = ens + ordered(channel) + ordered(plan.stored.base)
                    value_args[3] = b"%d" % (plan.base_crc or 0)
                if plan.stored.crc is not None:
                    value_args[4] = b"%d" % plan.stored.crc
                planned[len(blobs) // 5] = (key, plan)
            blobs += value_args
        known = set(load)
        extra = list(dict.fromkeys(f for f in blobs[::5] if f not in known))
        run = ordered(prepared.run_id) if prepared.run_id is not None else b""
        ref = ens + ordered(prepared.checkpoint_id)
        record = Record.pack(
            ref, run, (load, extra), prepared.parent_id, prepared.metadata_json, prepared.checkpoint
        )
        head = (ref, record, run + ref if run else b"")
        root = prepared.checkpoint_id if not ns else None
        fell_back: set[int] = set()
        for _ in range(PLAN_ATTEMPTS):
            reply = yield from self._put(
                thread_id, (*head, *blobs), root, self._plan(prepared, ref)
            )
            if reply == 1:
                break
            if reply == b"indexes":  # a metadata key was declared: plan its entries too
                yield from self.load_declared()
                continue
            for index in reply:  # a delta's base changed since this process wrote it
                plan = planned[index - 1][1]
                assert plan.fallback is not None
                whole = encode_value(blobs[5 * index - 5], ens, plan.fallback)
                blobs[5 * index - 4 : 5 * index - 1] = [whole, b"", b""]  # send it whole
                fell_back.add(index)
        else:
            raise _unsettled("store the checkpoint")
        for index, (key, plan) in planned.items():  # for the next version's delta
            chosen = plan.remember_fallback if index + 1 in fell_back else plan.remember
            self.written.remember(key, chosen)

    def put_writes(self, prepared: PreparedWrites) -> Op[None]:
        """Store prepared writes with one ``PUT_WRITES`` script (none when there are no
        writes); the script keeps a regular write already stored and replaces a special
        one."""
        prepared = prepared.packed()
        if not prepared.writes:
            return
        path = prepared.task_path
        ref = ordered(prepared.checkpoint_ns) + ordered(prepared.checkpoint_id)
        task = ref + ordered(prepared.task_id)
        args: list[Any] = [ref]
        for w in prepared.writes:
            write_field = task + b"%d" % w.idx
            stored = encode_write(write_field, w.channel, path, w.type, w.codec, w.data)
            args += [write_field, stored, b"1" if w.replaces else b"0"]
        thread_id = prepared.thread_id
        if self.cluster and not self.ttl_ms:  # only a thread's expiry needs the registry
            yield Eval(lua.PUT_WRITES, self.keys(thread_id), (0, "", "", *args))
        else:
            yield from self._write(lua.PUT_WRITES, thread_id, self.ttl_ms, *args)

    # -- thread maintenance (ids checked by Checkpointer) --------------------------------

    def delete_threads(self, thread_ids: Sequence[str]) -> Op[None]:
        """Unlink every key of each thread and unregister it: one pipelined batch per
        thread, whatever its size; then remove its index entries, a page at a time."""
        yield from self.load_declared()  # the entries of keys declared since are removed too
        for thread_id in thread_ids:
            delete = Eval(lua.DELETE_THREAD, self.keys(thread_id), ())
            unindex = self.index("del", [(thread_id, None)])
            yield Batch((delete, self.untouch(thread_id), unindex))
            yield from self.unindex_thread(thread_id)

    def delete_runs(self, run_ids: Sequence[str]) -> Op[None]:
        """Probe every registered thread for these runs, and delete a batch of their
        checkpoints per script call where they are."""
        runs = [ordered(run_id) for run_id in run_ids]
        want = b"1" if (yield from self.load_declared()).keys else b"0"
        threads = yield from self.registered(lenient=True)
        for start in range(0, len(threads), SCAN):
            keys = [self.keys(thread_id) for thread_id in threads[start : start + SCAN]]
            probes = yield Batch(
                tuple(
                    Cmd(("ZRANGE", k[7], b"[" + run, b"(" + run + b"\xff", "BYLEX", "LIMIT", 0, 1))
                    for k in keys
                    for run in runs
                )
            )
            touched = []
            for i, thread_keys in enumerate(keys):
                if any(probes[i * len(runs) : (i + 1) * len(runs)]):
                    thread_id = threads[start + i]
                    while True:
                        reply = yield Eval(lua.DELETE_RUNS, thread_keys, (SCAN, want, *runs))
                        yield from self.unindex_deleted(thread_id, reply[1:])
                        if reply[0] < SCAN:
                            break
                    touched.append(thread_id)
            if touched:  # their newest root checkpoints may be gone
                yield from self.reindex(touched, "set")

    def copy_thread(self, source: str, target: str) -> Op[None]:
        """Copy the source into staging keys page by page, then rename them onto the
        target at once, if the source's change stamp shows nothing changed it meanwhile
        (else start again, up to COPY_ATTEMPTS times)."""
        skeys, tkeys = self.keys(source), self.keys(target)
        taken, present = yield Batch((Cmd(("EXISTS", tkeys[0])), Cmd(("EXISTS", *skeys))))
        if taken:
            raise ThreadExistsError(
                f"cannot copy thread {source!r} into {target!r}: {target!r} already has "
                "checkpoints; delete it first or choose a new thread id"
            )
        if not present:
            return
        refs = skeys[lua.THREAD_KEYS.index("refs")]
        by_name = dict(zip(lua.THREAD_KEYS, skeys, strict=True))
        for _ in range(COPY_ATTEMPTS):
            # Every script that changes the source counts its stamp up, so a stamp that is
            # the same after every page was read means the pages are one snapshot.
            stamp, present = yield Batch((Cmd(("HGET", refs, lua.STAMP)), Cmd(("EXISTS", *skeys))))
            if not present:
                return
            nonce = uuid.uuid4().hex
            base = f"{self.prefix}:{{{tag_of(target)}}}:copy:{nonce}:".encode()
            stage = {name: base + name.encode() for name in lua.THREAD_KEYS}
            metadata: dict[bytes, Any] = {}  # of each staged record: the copy's index entries
            for name in _STAGE_ORDER:  # indexes before data: every copied entry finds its data
                seen = metadata.update if name == "cp" else None
                yield from self._stage(by_name[name], stage[name], name in _ZSETS, seen)
            staged = tuple(stage[name] for name in lua.THREAD_KEYS)
            after, still = yield Batch((Cmd(("HGET", refs, lua.STAMP)), Cmd(("EXISTS", *skeys))))
            if after != stamp or still != present:  # changed (or expired) meanwhile
                yield Cmd(("UNLINK", *staged))
                continue
            done = yield from self._publish(target, (*staged, *tkeys, base + b"done"), metadata)
            if done:
                yield Cmd(("DEL", base + b"done"))  # it only had to outlive a retried call
                yield from self.reindex([target], "max")
                return
            raise ThreadExistsError(
                f"cannot copy thread {source!r} into {target!r}: {target!r} got data while "
                "it was being copied; nothing was copied"
            )
        raise StorageError(
            f"cannot copy thread {source!r} into {target!r}: the source kept changing while "
            f"it was being copied ({COPY_ATTEMPTS} attempts); nothing was copied. Copy it "
            "when no one is writing to it, pruning it or deleting its runs"
        )

    def _publish(self, target: str, keys: tuple[bytes, ...], metadata: dict[bytes, Any]) -> Op[int]:
        """Make a staged copy visible (``FINISH_COPY`` on ``keys``: the staging keys, the
        target's, the done marker): first register the target and add its index entries
        (from the staged records' ``metadata``), while the target's "copying" key tells
        readers that these entries' data is on its way; on a standalone server the script
        refuses if a metadata key was declared since, and the new key's entries are added
        first. The script's reply: 1 done, 0 the target has data."""
        copying = self.copying_key(target)
        yield Batch((Cmd(("SET", copying, "1", "PX", COPY_TTL_MS)), self.touch(target)))
        finish = (*keys, copying) + ((self.across.indexed,) if not self.cluster else ())
        for _ in range(PLAN_ATTEMPTS):
            declared: Declared = self.declared
            names = list(declared.keys)
            entries = [
                e for ref, md in metadata.items() for e in self.entries(target, ref, md, names)
            ]
            if (yield from self.add(entries, declared.generation)):
                done: int = yield Eval(lua.FINISH_COPY, finish, (self.ttl_ms, declared.generation))
                if done != 2:
                    return done
            yield from self.load_declared()
        raise _unsettled("publish the copy")

    @staticmethod
    def _stage(
        key: bytes, into: bytes, zset: bool, seen: Callable[[dict[bytes, Any]], None] | None = None
    ) -> Op[None]:
        """Copy ``key`` into ``into`` page by page (the staging key expires if abandoned);
        ``seen`` gets the metadata of each record of a ``cp`` key copied."""
        cursor: Any = 0 if not zset else b"-"
        while True:
            if zset:
                members = yield Cmd(("ZRANGE", key, cursor, b"+", "BYLEX", "LIMIT", 0, SCAN))
                write = [x for m in members for x in (0, m)]
                if members:
                    cursor = b"(" + members[-1]
                more = len(members) == SCAN
            else:
                cursor, pairs = yield Cmd(("HSCAN", key, cursor, "COUNT", SCAN // 5))
                write = [x for f, v in pairs.items() if f != lua.STAMP for x in (f, v)]
                more = cursor != 0
                if seen is not None:
                    seen({f: metadata_of(f, v) for f, v in pairs.items() if f != lua.STAMP})
            if write:
                command = "ZADD" if zset else "HSET"
                yield Batch((Cmd((command, into, *write)), Cmd(("PEXPIRE", into, COPY_TTL_MS))))
            if not more:
                return

    def keep_latest(self, thread_ids: Sequence[str]) -> Op[None]:
        """``prune(strategy="keep_latest")`` of each thread, in bounded batches."""
        yield from self.load_declared()  # the entries of keys declared since are removed too
        for thread_id in thread_ids:
            yield from self._keep_latest(thread_id)

    def _keep_latest(self, thread_id: str) -> Op[None]:
        """Delete every checkpoint of the thread older than its namespace's newest that the
        newest does not need; checkpoints put meanwhile are newer, so they survive."""
        keys = self.keys(thread_id)
        heads: list[bytes] = []
        while True:
            after = first(heads[-1]) if heads else b""
            page = yield Eval(lua.NAMESPACES, (keys[1],), (after, SCAN))
            heads += page
            if len(page) < SCAN:
                break
        newest: dict[str, str] = {}
        keep: dict[str, set[str]] = {}
        for start in range(0, len(heads), PAGE):
            items = yield from self._read(
                thread_id, keys, "r", "refs", *heads[start : start + PAGE], refresh=False
            )
            for item in items:
                if not item[1]:
                    continue
                ns, checkpoint_id = self._place(thread_id, item[0])
                metadata = self._record(thread_id, item).metadata
                chains: Mapping[str, list[str]] = {}
                if channels := delta_channels(metadata):
                    ancestors = yield from self._walk(thread_id, ns, checkpoint_id, channels)
                    chains = walk_chains(checkpoint_id, ancestors, channels, holds_value)[0]
                newest[ns] = checkpoint_id
                keep[ns] = keep_latest_ids(checkpoint_id, metadata, _constant(chains))
        low = b"-"
        while True:
            members = yield Cmd(("ZRANGE", keys[0], low, b"+", "BYLEX", "LIMIT", 0, SCAN))
            doomed = []
            for member in members:
                ref = swap(member) if END in member else member
                ns, checkpoint_id = self._place(thread_id, ref)  # a damaged member raises
                if ns in newest and checkpoint_id < newest[ns] and checkpoint_id not in keep[ns]:
                    doomed.append(ref)
            want = b"1" if self.declared.keys else b"0"
            for start in range(0, len(doomed), DELETE_BATCH):
                batch = doomed[start : start + DELETE_BATCH]
                deleted = yield Eval(lua.DELETE_REFS, keys, (want, *batch))
                yield from self.unindex_deleted(thread_id, deleted)
            if len(members) < SCAN:
                return
            low = b"(" + members[-1]


def _unsettled(what: str) -> StorageError:
    return StorageError(
        f"could not {what}: metadata indexes kept being declared meanwhile "
        f"({PLAN_ATTEMPTS} attempts); try again"
    )


def _constant(
    chains: Mapping[str, list[str]],
) -> Callable[[list[str]], Mapping[str, list[str]]]:
    return lambda _: chains

"""``verify()`` of the Redis checkpointer: the registry, then every registered thread
read whole (no ``SCAN``: the registry lists the threads) and checked by
:class:`~.audit.Audit`; with ``repair``, the audit's fixes applied by the ``REPAIR``
script, which runs only if the thread's change stamp is still the one the snapshot was
read under (else the thread is read and checked again). A thread is read between two
reads of its change stamp, so a snapshot is consistent even while others write.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper.backends.redis import _lua as lua
from statekeeper.backends.redis._client import ordered, split_ordered, untag
from statekeeper.backends.redis._index.scripts import REGISTRY
from statekeeper.backends.redis._index.upkeep import Upkeep
from statekeeper.backends.redis._integrity.audit import Audit, Fix, Snapshot
from statekeeper.backends.redis._integrity.indexes import IndexAudit
from statekeeper.backends.redis._integrity.seal import (
    BACKEND,
    KEY_TYPES,
    KINDS,
    Bad,
    damage,
    path,
)
from statekeeper.backends.redis._io import Batch, Cmd, Eval, Op
from statekeeper.backends.redis._layout import END
from statekeeper.backends.redis._listing import read_roots
from statekeeper.errors import Damage, StorageError

__all__ = ["Verify"]

ATTEMPTS = 5  # reads of a thread that changed while it was read
PAGE = 500  # members or fields per paging call
REPAIR_ARGS = 1000  # arguments per REPAIR script call


class Verify:
    """One ``verify()`` run over a checkpointer's layout (see the module docstring)."""

    def __init__(self, layout: Upkeep, serde: SerializerProtocol) -> None:
        self.layout = layout
        self.serde = serde
        self.across: IndexAudit | None = None  # the indexes across threads (layout 4)

    def everything(self, *, repair: bool) -> Op[list[Damage]]:
        """The damage of the registry and of every registered thread, repaired as far
        as intact records allow when ``repair``."""
        registry, key = self.layout.registry, f"{self.layout.prefix}:layout".encode()
        kind, version = yield Batch((Cmd(("TYPE", registry)), Cmd(("GET", key))))
        if _text(kind) not in ("zset", "none"):
            reason = f"the registry of threads holds a {_text(kind)}, not a sorted set"
            return [Damage(reason, BACKEND, record="index", path=path(registry))]
        found: list[Damage] = []
        threads = []
        for member in (yield from self._members(registry)):
            try:
                threads.append(untag(member))
            except ValueError:
                reason = "a member of the registry of threads is no thread's tag"
                found.append(Damage(reason, BACKEND, record="index", path=path(registry, member)))
        counted = (self.layout.registry, self.layout.counter)
        members, count = yield Eval(REGISTRY, counted, ("check",))
        if count is not None and int(count) != members:
            reason = (
                f"the registry of threads lists {members} threads where {int(count)} were "
                "registered (members or the whole key were deleted)"
            )
            found.append(Damage(reason, BACKEND, record="index", path=path(registry)))
        if repair and (count is None or int(count) != members):
            yield Eval(REGISTRY, counted, ("reset",))
        if threads and version is None:
            reason = "the layout version key is missing"
            found.append(Damage(reason, BACKEND, record="index", path=path(key)))
            if repair:
                yield Cmd(("SET", key, lua.LAYOUT_VERSION, "NX"))
        if self.layout.listed:  # (keys of an older layout, read-only, have none)
            self.across = IndexAudit(self.layout, repair=repair)
            found += yield from self.across.start()
        for thread_id in threads:
            found += yield from self.thread(thread_id, repair=repair)
        if self.layout.indexed:  # (keys of an older layout, read-only, have no index)
            found += yield from self.thread_index(threads, repair=repair)
        if self.across is not None:
            found += yield from self.across.walk()
        return found

    def thread_index(self, threads: list[str], *, repair: bool) -> Op[list[Damage]]:
        """The damage of the thread index: entries that disagree with the threads'
        newest root checkpoints (read twice, so that a thread written between the two
        reads is no damage). ``repair``: rebuilt from the threads."""
        layout = self.layout
        keys = (layout.heads, layout.head_of)
        kinds = [_text(kind) for kind in (yield Batch(tuple(Cmd(("TYPE", k)) for k in keys)))]
        found = [
            Damage(
                f"the thread index holds a {kind}, not a {want}",
                BACKEND,
                record="index",
                path=path(k),
            )
            for k, kind, want in zip(keys, kinds, ("zset", "hash"), strict=True)
            if kind not in ("none", want)
        ]
        wrong: set[bytes] = set()
        ahead: set[bytes] = set()
        if not found:
            for _ in range(2):  # a thread that differs only once was written meanwhile
                differ, ahead = yield from self._index_differs(threads)
                wrong = differ if not wrong else wrong & differ
                if not wrong:
                    break
        if wrong:
            names = sorted(_thread_name(field) for field in wrong)
            shown = ", ".join(repr(n) for n in names[:5]) + (", ..." if len(names) > 5 else "")
            reason = (
                f"the thread index disagrees with {len(names)} threads' newest root "
                f"checkpoints ({shown}): entries deleted, left behind or damaged"
            )
            found.append(Damage(reason, BACKEND, record="index", path=path(layout.heads)))
        if repair and (found or ahead):
            found = [replace(d, reason=f"{d.reason} [rebuilt from the threads]") for d in found]
            yield Cmd(("DEL", *keys))
            for start in range(0, len(threads), PAGE):
                chunk = threads[start : start + PAGE]
                newest = yield from read_roots(layout, chunk)
                if there := [(t, n) for t, n in zip(chunk, newest, strict=True) if n]:
                    yield layout.index("max", there)
        return found

    def _index_differs(self, threads: list[str]) -> Op[tuple[set[bytes], set[bytes]]]:
        """The fields (E(thread id)) where the index and the threads disagree, and those
        of them that are no damage: in a Cluster the index is written just before the
        put's script (another slot), so a put killed between the two leaves its thread
        indexed by a checkpoint newer than any it has (or by one, when it has none) —
        harmless, as the registry entry it leaves is: a listing reads each listed
        thread's real head, and the thread's next put replaces the entry (the newer id
        wins). Those are left out of the damage, and rebuilt by a repair."""
        layout = self.layout
        expected: dict[bytes, bytes] = {}
        unreadable: set[bytes] = set()  # an ns key of another type: the thread reports it
        for start in range(0, len(threads), PAGE):
            chunk = threads[start : start + PAGE]
            newest = yield from read_roots(layout, chunk)
            for thread_id, checkpoint_id in zip(chunk, newest, strict=True):
                field = ordered(thread_id)
                if checkpoint_id == "":
                    unreadable.add(field)
                elif checkpoint_id is not None:
                    expected[field] = ordered(checkpoint_id) + field
        members = set((yield from self._members(layout.heads)))
        fields = yield from self._fields(layout.head_of)
        wrong = {f for f in expected.keys() | fields.keys() if expected.get(f) != fields.get(f)}
        # members listed wrongly (left behind, stale) or missing
        wrong |= {_field_of(member) for member in members ^ set(expected.values())}
        if layout.ttl_ms:  # threads that expired are left in the index, as in the registry
            wrong &= expected.keys()
        ahead: set[bytes] = set()
        if layout.cluster:
            listed: dict[bytes, set[bytes]] = {}
            for member in members:
                listed.setdefault(_field_of(member), set()).add(member)
            ahead = {
                f
                for f in wrong
                if f in fields
                and (f not in expected or fields[f] > expected[f])
                and listed.get(f) == {fields[f]}  # the hash and the set agree: one put's
            }
        return wrong - unreadable - ahead, ahead

    def thread(self, thread_id: str, *, repair: bool) -> Op[list[Damage]]:
        """The damage of one thread (repaired when ``repair``)."""
        keys = self.layout.named(thread_id)
        for _ in range(ATTEMPTS):
            types = yield Batch(tuple(Cmd(("TYPE", key)) for key in keys.values()))
            wrong = {
                name: _text(kind)
                for (name, key), kind in zip(keys.items(), types, strict=True)
                if _text(kind) not in ("none", KEY_TYPES[name].decode())
            }
            stamp = None if "refs" in wrong else (yield Cmd(("HGET", keys["refs"], lua.STAMP)))
            snap = yield from self._snapshot(keys, wrong)
            after = None if "refs" in wrong else (yield Cmd(("HGET", keys["refs"], lua.STAMP)))
            if after != stamp:
                continue  # changed while it was read: read it again
            found = [
                damage(
                    Bad(
                        f"the key holds a {kind} (overwritten by another program)",
                        KINDS[name],
                        name,
                    ),
                    keys,
                    thread_id,
                )
                for name, kind in wrong.items()
            ]
            audit = Audit(self.serde, thread_id, keys, snap).run()
            found += audit.found
            if self.across is not None:
                found += yield from self.across.thread(thread_id, snap, audit)
            if (
                repair
                and not wrong
                and audit.fixes
                and not (yield from self._repair(keys, stamp, audit.fixes))
            ):
                continue  # changed before the repair: check it again
            return found
        raise StorageError(
            f"thread {thread_id!r} kept changing while it was verified ({ATTEMPTS} "
            "attempts); verify it again when fewer writers are busy with it"
        )

    def _snapshot(self, keys: dict[str, bytes], wrong: dict[str, str]) -> Op[Snapshot]:
        snap = Snapshot()
        for name in ("ids", "ns", "runs", "wix"):
            if name not in wrong:
                setattr(snap, name, set((yield from self._members(keys[name]))))
        for name in ("cp", "blobs", "refs", "writes"):
            if name not in wrong:
                setattr(snap, name, (yield from self._fields(keys[name])))
        return snap

    @staticmethod
    def _members(key: bytes) -> Op[list[bytes]]:
        """Every member of a sorted set, by BYLEX pages (every score is 0, but for the
        registry, read with ZSCAN)."""
        found: dict[bytes, None] = {}
        cursor: Any = 0
        while True:
            cursor, page = yield Cmd(("ZSCAN", key, cursor, "COUNT", PAGE))
            found.update(dict.fromkeys(member for member, _ in page))
            if int(cursor) == 0:
                return list(found)

    @staticmethod
    def _fields(key: bytes) -> Op[dict[bytes, bytes]]:
        found: dict[bytes, bytes] = {}
        cursor: Any = 0
        while True:
            cursor, page = yield Cmd(("HSCAN", key, cursor, "COUNT", PAGE // 5))
            found.update(page)
            if int(cursor) == 0:
                return found

    def _repair(self, keys: dict[str, bytes], stamp: bytes | None, fixes: list[Fix]) -> Op[bool]:
        """Apply ``fixes`` in script calls of bounded size, each only if the thread's
        stamp is the one the previous call left. False if the thread changed first."""
        thread_keys = tuple(keys.values())
        current = stamp or b""
        batch: list[Any] = []
        for fix in [*fixes, None]:
            if fix is not None:
                batch += [str(part) if isinstance(part, int) else part for part in fix]
            if batch and (fix is None or len(batch) >= REPAIR_ARGS):
                current = yield Eval(lua.REPAIR, thread_keys, (current, *batch))
                if current is None:
                    return False
                batch = []
        return True


def _field_of(member: bytes) -> bytes:
    """The hash field (E(thread id)) of an index member E(checkpoint id) E(thread id)."""
    return member[member.index(END) + 2 :] if END in member else member


def _thread_name(field: bytes) -> str:
    try:
        return split_ordered(field)[0]
    except UnicodeDecodeError:
        return repr(field)


def _text(reply: bytes | str) -> str:
    return reply.decode() if isinstance(reply, bytes) else reply

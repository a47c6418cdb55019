"""``RedisStore``: a memory store in Redis (or Valkey), standalone or Cluster.

Plain Redis 6.2+ with no modules: strings, sorted sets and Lua scripts only. Each item is
one key, with every key of its namespace under the namespace's hash tag, so each put and
delete is one script on one node (the layout: :mod:`statekeeper.backends.redis._store_lua`).
Search reads the items under the prefix and scores them in Python, as the file store
does. Only this module and the ones it imports import ``redis``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from types import NoneType
from typing import Any, Self

from langgraph.store.base import IndexConfig, TTLConfig

from statekeeper.backends.redis import _store_lua as lua
from statekeeper.backends.redis._client import RedisOptions, RedisTarget
from statekeeper.backends.redis._io import Batch, Cmd, Connection, Eval, Op
from statekeeper.checkpointers.semantics import MODES, check_choice
from statekeeper.errors import (
    ReadOnlyError,
    SchemaVersionError,
    StorageError,
    StorageNotFoundError,
)
from statekeeper.memory.store.base import Plan, Write
from statekeeper.memory.store.items import ItemStore, Namespace, StoredItem
from statekeeper.urls import OptionKind, StorageURL, parse_options

__all__ = ["RedisStore"]

LAYOUT_VERSION = 1
SCAN = 500  # registry entries, index members or items per paging call
_CALLS = 100  # requests per pipelined batch
_OPTIONS: dict[str, OptionKind] = {
    "prefix": str,
    "retries": int,
    "socket_timeout": float,
    "ssl_ca_certs": (str, os.PathLike, NoneType),
    "ssl_cert_reqs": str,
    "mode": str,
    "semantic_weight": float,
    "ttl": object,
    "index": object,
}


class RedisStore(ItemStore):
    """A LangGraph store in Redis.

    Args:
        url: ``redis://[[user]:password@]host[:port][/db]``, ``rediss://...`` (TLS),
            ``redis+cluster://host:port`` or ``rediss+cluster://host:port``.
        options: how to reach the server and name the keys
            (:class:`~statekeeper.backends.redis.RedisOptions`: ``prefix``, ``mode``,
            ``retries``, ``socket_timeout``, ``ssl_ca_certs``, ``ssl_cert_reqs``). Every
            key starts with ``<prefix>:store:``; stores with different prefixes never see
            each other's items, and a checkpointer may share the prefix (and the options).
            ``mode="ro"``: nothing is ever written (not on open, not a TTL refresh on
            read); a batch with a put or delete, and ``sweep_ttl``, raise ReadOnlyError.
        index, ttl, semantic_weight: as for :class:`~statekeeper.memory.store.SqliteStore`.

    Guarantees: each put and delete is one Lua script (atomic, also in a Cluster); a
    reader sees an item whole or not at all. Namespaces and keys are encoded into key
    names, so none can reach outside the prefix or another namespace. Expiry follows the
    writers' clock (as on every backend), and each item's key also expires by itself
    (``PEXPIRE``). Search reads every item under the searched prefix: O(items). Driver
    errors are raised as :class:`~statekeeper.errors.StorageError` naming the URL without
    its password; a server that refuses writes (a read-only replica) makes writes raise
    :class:`~statekeeper.errors.ReadOnlyError`.

    Raises:
        StorageNotFoundError: ``mode="ro"`` and the prefix holds no memory store.
    """

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        options: RedisOptions | None = None,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        semantic_weight: float = 0.5,
    ) -> None:
        super().__init__(index=index, ttl=ttl, semantic_weight=semantic_weight)
        options = options or RedisOptions()
        self.target = RedisTarget.for_component(url, options, "open_store()")
        self.read_only = check_choice("option mode", options.mode, MODES) == "ro"
        self.prefix = options.prefix
        self._keys = lua.Keys(self.prefix)
        self._cluster = self.target.cluster
        self._conn = Connection(self.target)
        try:
            self._conn.run(self._check_layout())
        except BaseException:
            self._conn.close()
            raise

    @classmethod
    def from_url(cls, url: StorageURL, options: Mapping[str, Any]) -> Self:
        """Build from a parsed URL: its query options (text) and keyword ``options``
        (``index`` among them); keywords win."""
        merged = parse_options("Redis memory store", _OPTIONS, url.options, options)
        connection, rest = RedisOptions.split(merged)
        return cls(url.raw.split("?", 1)[0], connection, **rest)

    def close(self) -> None:
        """Disconnect. Idempotent; later calls raise StorageError."""
        super().close()
        self._conn.close()

    def __repr__(self) -> str:
        mode = ", mode='ro'" if self.read_only else ""
        return f"{type(self).__name__}({self.target.url!r}, prefix={self.prefix!r}{mode})"

    def _check_layout(self) -> Op[None]:
        """Check the layout version; read-write, store it. Read-only, write nothing, and
        refuse a prefix where no store ever wrote."""
        key = self._keys.version
        if self.read_only:
            get, registered = Cmd(("GET", key)), Cmd(("EXISTS", self._keys.registry))
            stored, namespaces = yield Batch((get, registered))
            if stored is None and not namespaces:
                raise StorageNotFoundError(
                    f"no memory store under prefix {self.prefix!r} at {self.target.url}: "
                    "nothing was ever stored there; check the prefix and the database "
                    "number (opened read-only, nothing was created)"
                )
        else:
            try:
                _, stored = yield Batch((Cmd(("SETNX", key, LAYOUT_VERSION)), Cmd(("GET", key))))
            except ReadOnlyError:  # a replica: reads work, and writes will say why they fail
                stored = yield Cmd(("GET", key))
        if stored is None:
            return
        if not (stored.isascii() and stored.isdigit()):
            raise SchemaVersionError(
                f"the key {key.decode()!r} at {self.target.url} holds "
                f"{stored.decode(errors='replace')!r}, not a statekeeper layout version: it "
                "belongs to something else; use another prefix"
            )
        if int(stored) > LAYOUT_VERSION:
            raise SchemaVersionError(
                f"the memory store under prefix {self.prefix!r} at {self.target.url} uses "
                f"layout version {int(stored)}, newer than this statekeeper knows "
                f"({LAYOUT_VERSION}); upgrade statekeeper"
            )

    # -- ItemStore -------------------------------------------------------------------------

    def _run(self, plan: Plan, now: float) -> list[Any]:
        if self.read_only and plan.writes:  # refused whole, before any step runs
            self._writable("put or delete items")
        return super()._run(plan, now)

    def _writable(self, operation: str) -> None:
        if self.read_only:
            raise ReadOnlyError(
                f"cannot {operation}: {self!r} is open read-only (mode=ro); open it "
                "read-write to change it"
            )

    def _put(self, write: Write, now: float) -> None:
        self._conn.run(self._put_op(write, now))

    def _load(self, namespace: Namespace, key: str) -> StoredItem | None:
        index, item = self._keys.index(namespace), self._keys.item(namespace, key)
        reply = self._conn.run(_one(Eval(lua.READ, (index, item), (key.encode(),))))
        if not reply or reply[1] is None:
            return None  # never stored, deleted, or its key expired
        return self._decode(namespace, key, float(reply[0]), reply[1])

    def _scan(self, prefix: Namespace, now: float) -> list[StoredItem]:
        return self._conn.run(self._scan_op(prefix, now))

    def _namespaces(self, prefix: Namespace, now: float) -> list[Namespace]:
        return self._conn.run(self._namespaces_op(prefix, now))

    def _refresh(self, items: Sequence[StoredItem], now: float) -> None:
        if not self.read_only:  # reading never writes in read-only mode
            self._conn.run(self._refresh_op(items, now))

    def _sweep(self, now: float) -> int:
        if self._closed:
            raise StorageError(f"{self!r} is closed; open a new store")
        self._writable("delete expired items")
        return self._conn.run(self._sweep_op(now))

    # -- operations, each written once as a generator of requests ------------------------------

    def _put_op(self, write: Write, now: float) -> Op[None]:
        ns = write.namespace
        keys = (self._keys.index(ns), self._keys.item(ns, write.key))
        member, registered = write.key.encode(), self._keys.member(ns)
        if write.value is None:
            removal = (member, repr(now), registered)
            if not self._cluster:
                yield Eval(lua.DELETE, (*keys, self._keys.registry), removal)
            elif (yield Eval(lua.DELETE, keys, removal)) == 0:
                yield from self._unregister(ns)
            return
        item = StoredItem.made(write, None, now)  # the script keeps a live item's created_at
        updated, rest = lua.encode_item(item)
        score = "+inf" if item.expires_at is None else repr(item.expires_at)
        ttl_ms = 0 if write.ttl is None else math.ceil(write.ttl * 60_000)
        args = (member, updated, score, ttl_ms, rest, repr(now), registered)
        if not self._cluster:
            yield Eval(lua.PUT, (*keys, self._keys.registry), args)
            return
        # The registry is in another slot: register before the write (a writer killed
        # between the two leaves an empty, harmless entry) and after it (so an entry that
        # a concurrent delete of the namespace's last item dropped comes back).
        register = Cmd(("ZADD", self._keys.registry, 0, registered))
        yield Batch((register, Eval(lua.PUT, keys, args), register))

    def _unregister(self, namespace: Namespace) -> Op[None]:
        """Drop an empty namespace from the registry (Cluster), then check again: a put
        that wrote meanwhile keeps its entry."""
        member = self._keys.member(namespace)
        yield Cmd(("ZREM", self._keys.registry, member))
        if (yield Cmd(("ZCARD", self._keys.index(namespace)))):
            yield Cmd(("ZADD", self._keys.registry, 0, member))

    def _registered(self, prefix: Namespace) -> Op[list[Namespace]]:
        """The registered namespaces under ``prefix``, by BYLEX pages of the registry."""
        text = self._keys.member(prefix)
        low, high = (b"-", b"+") if not prefix else (b"[" + text, b"(" + text + b"/")
        found: list[Namespace] = []
        while True:
            page = yield Cmd(("ZRANGE", self._keys.registry, low, high, "BYLEX", "LIMIT", 0, SCAN))
            for member in page:
                namespace = tuple(member.decode("utf-8").split("."))
                # the range also holds siblings such as "docs-x" for "docs": keep children
                if namespace[: len(prefix)] == prefix:
                    found.append(namespace)
            if len(page) < SCAN:
                return found
            low = b"(" + page[-1]

    def _entries(self, namespaces: list[Namespace]) -> Op[dict[Namespace, dict[bytes, float]]]:
        """Every index entry (item key -> expiry) of each namespace, by ZSCAN pages."""
        entries: dict[Namespace, dict[bytes, float]] = {ns: {} for ns in namespaces}
        cursors: dict[Namespace, int] = dict.fromkeys(namespaces, 0)
        while cursors:
            todo = list(cursors)[:_CALLS]
            calls = tuple(
                Cmd(("ZSCAN", self._keys.index(ns), cursors[ns], "COUNT", SCAN)) for ns in todo
            )
            for ns, (cursor, page) in zip(todo, (yield Batch(calls)), strict=True):
                entries[ns].update((member, float(score)) for member, score in page)
                if int(cursor) == 0:
                    del cursors[ns]
                else:
                    cursors[ns] = cursor
        return entries

    def _scan_op(self, prefix: Namespace, now: float) -> Op[list[StoredItem]]:
        namespaces = yield from self._registered(prefix)
        groups: list[tuple[Namespace, list[tuple[str, float]]]] = []  # one MGET each
        for ns, members in (yield from self._entries(namespaces)).items():
            live = [(m.decode("utf-8"), expires) for m, expires in members.items() if expires > now]
            groups += [(ns, live[i : i + SCAN]) for i in range(0, len(live), SCAN)]
        found = []
        for start in range(0, len(groups), _CALLS):
            chunk = groups[start : start + _CALLS]
            calls = tuple(
                Cmd(("MGET", *(self._keys.item(ns, key) for key, _ in group)))
                for ns, group in chunk
            )
            for (ns, group), values in zip(chunk, (yield Batch(calls)), strict=True):
                for (key, expires), data in zip(group, values, strict=True):
                    if data is not None:  # deleted or expired since the index was read
                        found.append(self._decode(ns, key, expires, data))
        return found

    def _namespaces_op(self, prefix: Namespace, now: float) -> Op[list[Namespace]]:
        namespaces = yield from self._registered(prefix)
        live: list[Namespace] = []
        for start in range(0, len(namespaces), _CALLS):
            chunk = namespaces[start : start + _CALLS]
            calls = tuple(
                Cmd(("ZCOUNT", self._keys.index(ns), f"({now!r}", "+inf")) for ns in chunk
            )
            counts = yield Batch(calls)
            live.extend(ns for ns, count in zip(chunk, counts, strict=True) if count)
        return live

    def _refresh_op(self, items: Sequence[StoredItem], now: float) -> Op[None]:
        by_ns: dict[Namespace, list[StoredItem]] = {}
        for item in items:
            by_ns.setdefault(item.namespace, []).append(item)
        for ns, group in by_ns.items():
            args: list[Any] = [repr(now)]
            for item in group:
                assert item.ttl is not None
                ttl_ms = math.ceil(item.ttl * 60_000)
                args += [item.key.encode(), item.updated_at, repr(now + item.ttl * 60), ttl_ms]
            keys = (self._keys.index(ns), *(self._keys.item(ns, item.key) for item in group))
            yield Eval(lua.REFRESH, keys, tuple(args))

    def _sweep_op(self, now: float) -> Op[int]:
        deleted = 0
        namespaces = yield from self._registered(())
        for ns, members in (yield from self._entries(namespaces)).items():
            expired = [member for member, expires in members.items() if expires <= now]
            left = len(members)
            for start in range(0, len(expired), SCAN):
                chunk = expired[start : start + SCAN]
                item_keys = tuple(self._keys.item(ns, m.decode("utf-8")) for m in chunk)
                keys = (self._keys.index(ns), *item_keys)
                if not self._cluster:
                    keys += (self._keys.registry,)
                args = (repr(now), self._keys.member(ns), len(chunk), *chunk)
                gone, left = yield Eval(lua.SWEEP, keys, args)
                deleted += gone
            if self._cluster and not left:
                yield from self._unregister(ns)
        return deleted

    def _decode(self, namespace: Namespace, key: str, expires: float, data: bytes) -> StoredItem:
        try:
            return lua.decode_item(namespace, key, expires, data)
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            raise StorageError(
                f"the memory item {key!r} of namespace {namespace!r} at {self.target.url} "
                f"(key {self._keys.item(namespace, key).decode()!r}) is damaged: {exc}"
            ) from None


def _one(call: Eval) -> Op[Any]:
    return (yield call)

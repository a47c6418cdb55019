"""The Redis memory store's key layout, item bytes and Lua scripts (see
``docs/memory-store.md``). Everything here is pure.

Keys, ``<p>`` being the prefix, ``<ns>`` a namespace's labels joined by ``.`` and
``<key>`` an item key, both encoded by :func:`~._client.tag` (percent-encoding:
no braces, no ``:``, distinct texts give distinct tags)::

    <p>:store:version            string      the layout version
    <p>:store:namespaces         sorted set  the registry: every namespace holding items,
                                             member = its labels joined by "." (UTF-8),
                                             all scores 0, so a prefix is a BYLEX range
    <p>:store:{<ns>}:keys        sorted set  member = an item key (UTF-8); score = when it
                                             expires (Unix seconds), +inf for never
    <p>:store:{<ns>}:item:<key>  string      created_at (32 bytes), updated_at (32), a JSON
                                             line (TTL, terms, embeddings), the value JSON

Every key of a namespace has the namespace's hash tag, so each script below touches one
Cluster slot. The registry has its own slot: on a standalone server the scripts update it
too (pass it as the last key), in a Cluster the caller does, around them.
"""

from __future__ import annotations

import base64
import json

from statekeeper.backends.redis._client import tag
from statekeeper.backends.redis._io import Script
from statekeeper.memory.store.items import Namespace, StoredItem

__all__ = ["DELETE", "PUT", "READ", "REFRESH", "SWEEP", "Keys", "decode_item", "encode_item"]

_STAMP = 32  # bytes of a stamp() in UTC


class Keys:
    """The key names of one store's prefix."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.version = f"{prefix}:store:version".encode()
        self.registry = f"{prefix}:store:namespaces".encode()

    @staticmethod
    def member(namespace: Namespace) -> bytes:
        """The namespace's registry member (labels never contain ``.`` or NUL)."""
        return ".".join(namespace).encode("utf-8")

    def _base(self, namespace: Namespace) -> str:
        return f"{self.prefix}:store:{{{tag('.'.join(namespace))}}}:"

    def index(self, namespace: Namespace) -> bytes:
        """The namespace's sorted set of item keys, scored by expiry."""
        return (self._base(namespace) + "keys").encode()

    def item(self, namespace: Namespace, key: str) -> bytes:
        """The key holding one item."""
        return (self._base(namespace) + "item:" + tag(key)).encode()


def encode_item(item: StoredItem) -> tuple[bytes, bytes]:
    """``(updated_at, rest)``: what the PUT script stores after the item's ``created_at``."""
    meta = {
        "ttl": item.ttl,
        "terms": list(item.terms),
        "vectors": [[path, base64.b64encode(blob).decode()] for path, blob in item.vectors],
    }
    line = json.dumps(meta, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return item.updated_at.encode(), line.encode() + b"\n" + item.value.encode("utf-8")


def decode_item(namespace: Namespace, key: str, expires: float, data: bytes) -> StoredItem:
    """The item stored as ``data``, whose index score is ``expires``.

    Raises:
        ValueError: ``data`` is not an item (KeyError, TypeError too).
    """
    head, _, value = data[2 * _STAMP :].partition(b"\n")
    meta = json.loads(head)
    ttl = meta["ttl"]
    return StoredItem(
        namespace=namespace,
        key=key,
        value=value.decode("utf-8"),
        created_at=data[:_STAMP].decode("ascii"),
        updated_at=data[_STAMP : 2 * _STAMP].decode("ascii"),
        ttl=None if ttl is None else float(ttl),
        expires_at=None if expires == float("inf") else expires,
        terms=tuple(str(term) for term in meta["terms"]),
        vectors=tuple((str(p), base64.b64decode(b, validate=True)) for p, b in meta["vectors"]),
    )


# Expired entries of a namespace's index are dropped by every put and delete in it (their
# item keys expire by themselves: PEXPIRE), so an index never grows with dead items.

# KEYS: index, item[, registry]. ARGV: member, updated_at, score, ttl (ms, 0: none), rest,
# now, registry member. Keeps created_at of a live item; replies with the stored created_at.
PUT = Script(
    r"""
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[6])
local created = ARGV[2]
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  local old = redis.call('GETRANGE', KEYS[2], 0, 31)
  if string.len(old) == 32 then created = old end
end
redis.call('SET', KEYS[2], created .. ARGV[2] .. ARGV[5])
if ARGV[4] ~= '0' then redis.call('PEXPIRE', KEYS[2], ARGV[4]) end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
if KEYS[3] then redis.call('ZADD', KEYS[3], 0, ARGV[7]) end
return created
"""
)

# KEYS: index, item[, registry]. ARGV: member, now, registry member. Replies with the
# number of entries left in the index (0: the namespace is empty, and unregistered).
DELETE = Script(
    r"""
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2])
local left = redis.call('ZCARD', KEYS[1])
if left == 0 and KEYS[3] then redis.call('ZREM', KEYS[3], ARGV[3]) end
return left
"""
)

# KEYS: index, item. ARGV: member. Replies [score, item] or nil (never stored).
READ = Script(
    r"""
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then return false end
return {score, redis.call('GET', KEYS[2])}
"""
)

# KEYS: index, item... ARGV: now, then per item: member, updated_at, new score, ttl (ms).
# Restarts the TTL of each item still live and not written since it was read.
REFRESH = Script(
    r"""
local now = tonumber(ARGV[1])
for i = 2, #KEYS do
  local at = 2 + (i - 2) * 4
  local score = redis.call('ZSCORE', KEYS[1], ARGV[at])
  if score and score ~= 'inf' and tonumber(score) > now
      and redis.call('GETRANGE', KEYS[i], 32, 63) == ARGV[at + 1] then
    redis.call('ZADD', KEYS[1], 'XX', ARGV[at + 2], ARGV[at])
    redis.call('PEXPIRE', KEYS[i], ARGV[at + 3])
  end
end
return 1
"""
)

# KEYS: index, item... [, registry]. ARGV: now, registry member, n (items), members...
# Deletes each item still expired; replies {deleted, entries left}.
SWEEP = Script(
    r"""
local now, n, deleted = tonumber(ARGV[1]), tonumber(ARGV[3]), 0
for i = 1, n do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[3 + i])
  if score and score ~= 'inf' and tonumber(score) <= now then
    redis.call('ZREM', KEYS[1], ARGV[3 + i])
    redis.call('DEL', KEYS[1 + i])
    deleted = deleted + 1
  end
end
local left = redis.call('ZCARD', KEYS[1])
if left == 0 and KEYS[n + 2] then redis.call('ZREM', KEYS[n + 2], ARGV[2]) end
return {deleted, left}
"""
)

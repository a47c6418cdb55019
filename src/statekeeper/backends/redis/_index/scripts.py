"""The Lua scripts of the registry's slot (``<prefix>:{<prefix>:threads}``; the registry
itself, ``<prefix>:threads``, hashes to the same slot): the registry of threads and its
count, the thread index, and the indexes across threads (:mod:`.members`). Each runs on
keys of that slot only (on a standalone server the ones that also check a thread take
that thread's keys too). Ids and members reach them only as ``KEYS``/``ARGV``.
"""

from __future__ import annotations

from statekeeper.backends.redis._io import Script
from statekeeper.backends.redis._lua import LIB

__all__ = [
    "ADD",
    "DECLARE",
    "ENTER",
    "EXPIRED",
    "FORGET",
    "INDEX",
    "REGISTER",
    "REGISTRY",
    "REMOVE_IF",
    "UNINDEX",
    "UNREGISTER",
]

# The thread registry (a sorted set: member = tagged thread id, score = the time in ms its
# keys expire, +inf for never) lives in its own slot, so it is updated next to the
# thread's scripts, not inside them. These two sweep entries whose threads expired.

# KEYS: registry. ARGV: now (ms), max. Reply: member, score, ... (scores as Redis prints them)
EXPIRED = Script(
    r"""
return redis.call('ZRANGE', KEYS[1], '-inf', '(' .. ARGV[1], 'BYSCORE',
  'LIMIT', 0, tonumber(ARGV[2]), 'WITHSCORES')
"""
)

# KEYS: registry, its count. ARGV: member, score, ... Removes each member whose score is
# unchanged (a writer that touched the thread since has moved its score, and keeps it).
REMOVE_IF = Script(
    r"""
local n = 0
for i = 1, #ARGV, 2 do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    n = n + redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
if n > 0 and KEYS[2] then redis.call('DECRBY', KEYS[2], n) end
return n
"""
)

# The registry's count (KEYS[2]) is the number of its members (KEYS[1]): every script that
# adds or removes one counts it, so a member or the whole key deleted by something else
# shows as a difference.

# KEYS: registry, count. ARGV: score, member. Registers a thread (or moves its score).
REGISTER = Script(
    r"""
if redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2]) == 1 then redis.call('INCR', KEYS[2]) end
return 1
"""
)

# KEYS: the thread index's sorted set and hash. ARGV: "max" (keep the newer of the stored
# and the given head: a put), "set" (the given one: the newest were deleted) or "del",
# then field, member pairs (member "" for "del").
INDEX = Script(
    LIB
    + r"""
for i = 2, #ARGV, 2 do
  if ARGV[1] == 'del' then unindex_head(KEYS[1], KEYS[2], ARGV[i])
  else index_head(KEYS[1], KEYS[2], ARGV[i], ARGV[i + 1], ARGV[1] == 'set') end
end
return 1
"""
)

# KEYS: registry, count. ARGV: member. Unregisters a thread.
UNREGISTER = Script(
    r"""
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then redis.call('DECR', KEYS[2]) end
return 1
"""
)

# KEYS: registry, count. ARGV: what ("check", "start": count the members if there is no
# count yet -- a registry of layout 1 --, "reset": count them now, a repair). Replies
# {members, count or false}.
REGISTRY = Script(
    r"""
if ARGV[1] == 'reset' or (ARGV[1] == 'start' and redis.call('EXISTS', KEYS[2]) == 0) then
  redis.call('SET', KEYS[2], redis.call('ZCARD', KEYS[1]))
end
return {redis.call('ZCARD', KEYS[1]), redis.call('GET', KEYS[2])}
"""
)

# -- the indexes across threads ---------------------------------------------------------

# A Cluster put's step in this slot, just before its script in the thread's slot (which
# cannot reach this one): registers the thread, updates the thread index and adds the
# checkpoint's index entries, all or nothing. KEYS: registry, count, heads, head, the
# declared-keys hash, then the index sets. ARGV: registry score and member, the thread
# index field and member ("" unless a root checkpoint), the generation the entries were
# planned for, then one member per index set (ARGV[i] goes to KEYS[i], i >= 6). Reply 1,
# or "indexes" with nothing done if a key was declared since (the caller plans again).
ENTER = Script(
    LIB
    + r"""
if (redis.call('HGET', KEYS[5], ':gen') or '') ~= ARGV[5] then return 'indexes' end
for i = 6, #ARGV do redis.call('ZADD', KEYS[i], 0, ARGV[i]) end  -- first: see PUT
if redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2]) == 1 then redis.call('INCR', KEYS[2]) end
if ARGV[4] ~= '' then index_head(KEYS[3], KEYS[4], ARGV[3], ARGV[4], false) end
return 1
"""
)

# Entries of many checkpoints (a copy, a build, a repair): KEYS: the declared-keys hash,
# then index sets. ARGV: the generation they were planned for ("*": any), then (KEYS
# position, member) pairs. Reply 1, or "indexes" with nothing added if a key was
# declared since.
ADD = Script(
    r"""
if ARGV[1] ~= '*' and (redis.call('HGET', KEYS[1], ':gen') or '') ~= ARGV[1] then
  return 'indexes'
end
for i = 2, #ARGV, 2 do redis.call('ZADD', KEYS[tonumber(ARGV[i])], 0, ARGV[i + 1]) end
return 1
"""
)

# Remove entries of one thread from one index, only where that cannot lose the entry of
# a stored checkpoint. KEYS: the index's two sets, then per mode:
#   "data" (a standalone server): the thread's cp and ns keys and its "copying" key; each
#     entry goes only if the thread has neither the record nor the ns member of its ref,
#     and none while a copy into the thread is being published (its entries come first);
#   "gone" (a Cluster, whose scripts cannot see the thread): the registry; the entries go
#     only if the thread is not registered or its registry deadline (ARGV[3], ms) passed:
#     every put moves the deadline into the future (or +inf) as it adds its entries, so
#     an entry of a put still under way is kept;
#   "all": no check (the caller deleted these checkpoints itself, or checked twice).
# ARGV: mode, the thread's tag and now ("gone"; else ""), then (order member, by-thread
# member, ref) triples. Reply: how many entries were removed.
UNINDEX = Script(
    r"""
local mode, n = ARGV[1], 0
if mode == 'data' and redis.call('EXISTS', KEYS[5]) == 1 then return 0 end
if mode == 'gone' then
  local at = redis.call('ZSCORE', KEYS[3], ARGV[2])
  if at and (at == 'inf' or tonumber(at) >= tonumber(ARGV[3])) then return 0 end
end
for i = 4, #ARGV, 3 do
  if mode ~= 'data' or (redis.call('HEXISTS', KEYS[3], ARGV[i + 2]) == 0
      and not redis.call('ZSCORE', KEYS[4], ARGV[i + 2])) then
    n = n + redis.call('ZREM', KEYS[1], ARGV[i])
    redis.call('ZREM', KEYS[2], ARGV[i + 1])
  end
end
return n
"""
)

# KEYS: the declared-keys hash. ARGV: metadata keys. Declares those not declared yet
# (state 0: being built) and, if there were any, counts the generation up. Reply: the
# hash's fields and values, flat.
DECLARE = Script(
    r"""
local added = 0
for i = 1, #ARGV do added = added + redis.call('HSETNX', KEYS[1], ARGV[i], '0') end
if added > 0 then redis.call('HINCRBY', KEYS[1], ':gen', 1) end
return redis.call('HGETALL', KEYS[1])
"""
)

# KEYS: the registry, its count, then every other key of the slot. Unlinks them all once
# no thread is registered (what is left in the indexes is stale: Redis frees it in the
# background); reply 1 when they are gone, 0 (nothing deleted) while a thread is left.
FORGET = Script(
    """
if redis.call('ZCARD', KEYS[1]) > 0 then return 0 end
redis.call('UNLINK', unpack(KEYS))
return 1
"""
)

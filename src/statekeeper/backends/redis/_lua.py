"""The Redis checkpointer's Lua scripts (see ``docs/redis.md`` for the key layout).

Every script works on the keys of ONE thread, all passed in ``KEYS`` and sharing the
thread's hash tag, so it runs atomically on one Cluster node. Ids reach scripts only as
``KEYS``/``ARGV`` values, already encoded; no script text is ever built from data. The
``KEYS`` of the thread scripts are, in order (see ``THREAD_KEYS``)::

    1 ids     sorted set  E(checkpoint id) E(ns)          newest-first listing, all namespaces
    2 ns      sorted set  E(ns) E(checkpoint id)  = ref   latest / listing in one namespace
    3 cp      hash        ref -> record                   the checkpoint without its values
    4 blobs   hash        E(ns) E(channel) E(version) -> value ("" = a version without value)
    5 refs    hash        blob field -> number of records (and deltas) that reference it;
                          also the base field and the CRC of each value, and the number
                          of pending writes of each checkpoint (``WCOUNT`` + ref)
    6 writes  hash        ref E(task id) idx -> pending write
    7 wix     sorted set  the fields of ``writes``        a checkpoint's writes by range
    8 runs    sorted set  E(run id) ref                   delete_for_runs

``KEYS[9]`` and ``KEYS[10]``, when given (standalone servers only), are the registry of
threads and the count of its members (a key in the registry's slot,
``<prefix>:{<prefix>:threads}:count``), which tells a deleted registry entry or key;
``PUT``'s ``KEYS[11]`` and ``KEYS[12]`` the thread index, ``KEYS[13]`` the hash of
declared metadata indexes (whose generation the put was planned against) and
``KEYS[14...]`` the indexes across threads the checkpoint enters, all in the same slot
(:mod:`statekeeper.backends.redis._index`, whose scripts run in that slot).

The field ``STAMP`` (one byte, ``\xff``: no value field is empty, so it is no value's CRC
field) of ``refs`` is the thread's change stamp, ``<seconds>.<microseconds>:<count>``: every
script that changes the thread (``PUT``, ``PUT_WRITES``, ``DELETE_REFS`` and ``DELETE_RUNS``
when they delete something, ``FINISH_COPY`` on its target) counts it up, a thread created
anew (or deleted and written again) starts it from the server's time, and an emptied
thread drops it. ``copy_thread`` reads it before and after it reads the source: equal
stamps mean no script changed the source in between. A thread written before the stamp
existed has none until its next write (``None`` reads as "no change yet").
``E`` is :func:`~._client.ordered`. A record starts with a header Lua can read
(length-prefixed parts): the run id part, the number of value fields it loads, the number of
further fields it references, those fields, the parent checkpoint id.

Scripts never return data proportional to the size of a thread: listing scripts take a
``LIMIT``, deletions take a batch and return a count, and the caller loops.
"""

from __future__ import annotations

from importlib import resources

from statekeeper.backends.redis._io import Script

__all__ = [
    "CHAINS",
    "DELETE_REFS",
    "DELETE_RUNS",
    "DELETE_THREAD",
    "FINISH_COPY",
    "LAYOUT",
    "LAYOUT_VERSION",
    "LIB",
    "NAMESPACES",
    "PUT",
    "PUT_WRITES",
    "READ",
    "REPAIR",
    "STAMP",
    "THREAD_KEYS",
    "WALK",
    "WCOUNT",
]

THREAD_KEYS = ("ids", "ns", "cp", "blobs", "refs", "writes", "wix", "runs")
STAMP = b"\xff"  # the field of ``refs`` holding the thread's change stamp
WCOUNT = b"\xfd"  # + ref: the field of ``refs`` counting a checkpoint's pending writes

# The functions every thread script starts with, kept as a Lua file to be read as Lua.
LIB = (resources.files(__package__) / "_thread_lib.lua").read_text(encoding="utf-8")
# ARGV: ttl, registry score and member, ref, record, run member ("" if none), the thread
# index member and field ("" unless the checkpoint is a root one and KEYS[11], KEYS[12]
# are given: then the index is updated in this script), the generation of the declared
# metadata indexes the members were planned for and how many members n follow (one per
# KEYS[14...]: "" and 0 in a Cluster, where they are added before), then per value:
# field, value, base field, base crc ("" unless the value is a delta), crc. If the
# declared indexes changed, nothing is written and the reply is "indexes" (the caller
# plans again); if the base of a delta is gone or changed, nothing is written and the
# reply lists those values (1-based) so the caller sends them whole; else the reply is 1.
# References are counted before the old record (a re-put) is released, so a value both
# records use survives.
PUT = Script(
    LIB
    + r"""
local ref, rec, run = ARGV[4], ARGV[5], ARGV[6]
local first = 11 + tonumber(ARGV[10])  -- the ARGV of the first value
if #KEYS > 12 and (redis.call('HGET', KEYS[13], ':gen') or '') ~= ARGV[9] then
  return 'indexes'
end
local stale = {}
for i = first, #ARGV, 5 do
  local base = ARGV[i + 2]
  if base ~= '' and redis.call('HGET', KEYS[5], '\255' .. base) ~= ARGV[i + 3] then
    stale[#stale + 1] = (i - first) / 5 + 1
  end
end
if #stale > 0 then return stale end
-- index entries first: a script stopped by an error (a key of another type) keeps what
-- it wrote before, and stale entries are all that may be left behind
for i = 14, #KEYS do redis.call('ZADD', KEYS[i], 0, ARGV[i - 3]) end
register()
if #KEYS > 10 and ARGV[7] ~= '' then index_head(KEYS[11], KEYS[12], ARGV[8], ARGV[7], false) end
for i = first, #ARGV, 5 do set_value(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 4]) end
local _, fields = header(rec)
for i = 1, #fields do redis.call('HINCRBY', KEYS[5], fields[i], 1) end
local old = redis.call('ZADD', KEYS[2], 0, ref) == 0 and redis.call('HGET', KEYS[3], ref)
if old then  -- stored before (a retried put): replace that record
  local oldrun, oldfields = header(old)
  if oldfields then release(oldfields) end
  if oldrun and oldrun ~= '' and oldrun .. ref ~= run then
    redis.call('ZREM', KEYS[8], oldrun .. ref)
  end
end
redis.call('HSET', KEYS[3], ref, rec)
redis.call('ZADD', KEYS[1], 0, swap(ref))
if run ~= '' then redis.call('ZADD', KEYS[8], 0, run) end
bump(KEYS[1], KEYS[5], KEYS[7], true)
expire(ARGV[1])
return 1
"""
)

# ARGV: ttl, registry score and member, the checkpoint's ref, then (field, value, replace)
# triples. A regular write already stored for (task, idx) is kept (replace "0"); special
# channels replace (replace "1"). The checkpoint's count of writes grows by the fields
# added; a checkpoint with writes of layout 1 (no count) gets the count of its wix range.
PUT_WRITES = Script(
    LIB
    + r"""
register()
local ref, added = ARGV[4], 0
for i = 5, #ARGV, 3 do
  if ARGV[i + 2] == '1' then
    added = added + redis.call('HSET', KEYS[6], ARGV[i], ARGV[i + 1])
  else
    added = added + redis.call('HSETNX', KEYS[6], ARGV[i], ARGV[i + 1])
  end
  redis.call('ZADD', KEYS[7], 0, ARGV[i])
end
bump(KEYS[1], KEYS[5], KEYS[7], true)
local counted = '\253' .. ref
if redis.call('HEXISTS', KEYS[5], counted) == 1 then
  if added > 0 then redis.call('HINCRBY', KEYS[5], counted, added) end
else
  redis.call('HSET', KEYS[5], counted,
    redis.call('ZLEXCOUNT', KEYS[7], '[' .. ref, '(' .. ref .. '\255'))
end
expire(ARGV[1])
return 1
"""
)

# ARGV: ttl (-1: no refresh), what ("r" records, "f" full, "w" writes only), n, then n
# (value field, crc) pairs the caller holds, then mode, then for mode "ids"/"ns": min,
# max, limit (newest first); for mode "refs": the refs.
# Reply: {{members of ids, of ns, fields of cp, 1 if refs holds the change stamp}, items}
# (the three counts are equal in an intact thread), an item per checkpoint: {ref, record
# or false, {chain per value field}, {write field, value or false, ...}, 1 if the ref is
# indexed but has no record (damage) else 0, its count of writes or false}; a chain is
# the stored value and the bases it is a delta on (large values as {field}: the caller
# fetches those with HMGET, and reads again if one is gone). A record whose header
# cannot be read gets no chains: the caller finds it damaged.
READ = Script(
    LIB
    + r"""
local what, a = ARGV[2], 4 + 2 * tonumber(ARGV[3])
for i = 4, a - 1, 2 do known[ARGV[i]] = ARGV[i + 1] end
local mode = ARGV[a]
local refs = {}
if mode == 'refs' then
  for i = a + 1, #ARGV do refs[#refs + 1] = ARGV[i] end
else
  local key = KEYS[2]
  if mode == 'ids' then key = KEYS[1] end
  local limit = tonumber(ARGV[a + 3])
  refs = redis.call('ZRANGE', key, ARGV[a + 2], ARGV[a + 1], 'BYLEX', 'REV', 'LIMIT', 0, limit)
  if mode == 'ids' then
    for i = 1, #refs do refs[i] = swap(refs[i]) end
  end
end
local check = {redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2]),
  redis.call('HLEN', KEYS[3]), redis.call('HEXISTS', KEYS[5], '\255')}
local out = {}
for i = 1, #refs do
  local ref = refs[i]
  local item = {ref, false, {}, {}, 0, false}
  if what ~= 'w' then
    item[2] = redis.call('HGET', KEYS[3], ref)
    if not item[2] and (mode ~= 'refs' or redis.call('ZSCORE', KEYS[2], ref)) then
      item[5] = 1
    end
  end
  if what == 'f' and item[2] then
    local _, fields, nload = header(item[2])
    if fields then
      for j = 1, nload do item[3][j] = chain(fields[j]) end
    end
  end
  if what == 'w' or (what == 'f' and item[2]) then
    item[4] = writes_of(ref)
    item[6] = redis.call('HGET', KEYS[5], '\253' .. ref)
  end
  out[i] = item
end
if #out > 0 and tonumber(ARGV[1]) > 0 then expire(ARGV[1]) end
return {check, out}
"""
)

# ARGV: value fields. Reply: the chain of each (see READ).
CHAINS = Script(
    LIB
    + r"""
local out = {}
for i = 1, #ARGV do out[i] = chain(ARGV[i]) end
return out
"""
)

# ARGV: want ("1": the metadata of each deleted checkpoint too), then refs. Reply: the ref
# and metadata JSON (false unless wanted) of each checkpoint that existed and was deleted,
# flat: the caller removes their index entries afterwards.
DELETE_REFS = Script(
    LIB
    + r"""
local out = {}
for i = 2, #ARGV do
  local rec = drop(ARGV[i])
  if rec then deleted(out, ARGV[i], rec, ARGV[1]) end
end
if #out > 0 then bump(KEYS[1], KEYS[5], KEYS[7]) end
return out
"""
)

# ARGV: budget, want (see DELETE_REFS), then E(run id) of each run. Deletes up to `budget`
# checkpoints of these runs; the reply is how many run entries were processed (budget:
# call again), then what DELETE_REFS replies for the checkpoints deleted.
DELETE_RUNS = Script(
    LIB
    + r"""
local budget, n, out = tonumber(ARGV[1]), 0, {}
for i = 3, #ARGV do
  local run = ARGV[i]
  local members = redis.call('ZRANGE', KEYS[8], '[' .. run, '(' .. run .. '\255',
    'BYLEX', 'LIMIT', 0, budget - n)
  for j = 1, #members do
    local ref = string.sub(members[j], #run + 1)
    local rec = drop(ref)
    if rec then deleted(out, ref, rec, ARGV[2]) end
    redis.call('ZREM', KEYS[8], members[j])
  end
  n = n + #members
  if n >= budget then break end
end
if n > 0 then bump(KEYS[1], KEYS[5], KEYS[7]) end
table.insert(out, 1, n)
return out
"""
)

# No ARGV. Unlinking is O(1) for the caller whatever the thread's size (Redis frees the
# memory in the background), so deleting a thread of any size is one bounded call. The
# change stamp goes with refs; a thread written again starts a new one from the time.
DELETE_THREAD = Script(
    r"""
local n = 0
for i = 1, #KEYS do n = n + redis.call('UNLINK', KEYS[i]) end
return n
"""
)

# KEYS: ns. ARGV: E(ns) to start after ("" = from the first), max namespaces.
# Reply: the newest ref of each namespace, in namespace order.
NAMESPACES = Script(
    r"""
local out, after = {}, ARGV[1]
for i = 1, tonumber(ARGV[2]) do
  local low = '-'
  if after ~= '' then low = '(' .. after .. '\255' end
  local first = redis.call('ZRANGE', KEYS[1], low, '+', 'BYLEX', 'LIMIT', 0, 1)
  if #first == 0 then break end
  local e = string.find(first[1], '\0\1', 1, true)
  after = string.sub(first[1], 1, e + 1)
  out[i] = redis.call('ZRANGE', KEYS[1], '(' .. after .. '\255', '[' .. after,
    'BYLEX', 'REV', 'LIMIT', 0, 1)[1]
end
return out
"""
)

# KEYS: cp, blobs, refs. ARGV: E(ns), checkpoint id to start from (excluded), max steps, then
# E(ns) E(channel) per channel. Follows parent links; per ancestor replies {id, {field or
# false per channel}}: the value field when that ancestor's version of the channel holds a
# value. Stops at the root, a missing parent, after max steps, or once every channel has
# been found (the caller continues from the last ancestor if it needs more).
WALK = Script(
    LIB
    + r"""
local ens, out = ARGV[1], {}
local at = ens .. enc(ARGV[2])
local rec = redis.call('HGET', KEYS[1], at)
local nch = #ARGV - 3
local found, nfound = {}, 0
for step = 1, tonumber(ARGV[3]) do
  if not rec or nfound == nch then break end
  local _, _, _, parent = header(rec)
  if not parent then return damaged('cp', at) end
  if parent == '' then break end
  at = ens .. enc(parent)
  rec = redis.call('HGET', KEYS[1], at)
  if not rec then break end
  local _, fields, nload = header(rec)
  if not fields then return damaged('cp', at) end
  local hits = {}
  for c = 1, nch do
    local prefix = ARGV[c + 3]
    hits[c] = false
    for i = 1, nload do
      if string.sub(fields[i], 1, #prefix) == prefix then
        if redis.call('HSTRLEN', KEYS[2], fields[i]) > 0 then
          hits[c] = fields[i]
        elseif redis.call('HEXISTS', KEYS[3], '\255' .. fields[i]) == 1 then
          return damaged('blobs', fields[i])  -- a value deleted or emptied
        end
        break
      end
    end
    if hits[c] and not found[c] then
      found[c] = true
      nfound = nfound + 1
    end
  end
  out[#out + 1] = {parent, hits}
end
return out
"""
)

# KEYS: the 8 staging keys, the 8 target keys, a marker key, the target's "copying" key
# (set while the copy's index entries are there before its data: readers keep them), and
# on a standalone server the hash of declared metadata indexes. ARGV: ttl, the generation
# of the declared indexes the copy's entries were added for.
# Makes a staged copy visible at once: renames every staging key onto the target, unless
# the target has data (reply 0; the staging keys are deleted), and starts the target's
# change stamp (the staged refs hold none: the caller leaves the source's out). Reply 1 on
# success, also when retried after a success (the marker remembers it for ten minutes);
# 2, with nothing done, if an index was declared since the entries were added.
FINISH_COPY = Script(
    LIB
    + r"""
local marker = KEYS[17]
if redis.call('EXISTS', marker) == 1 then return 1 end
if #KEYS > 18 and (redis.call('HGET', KEYS[19], ':gen') or '') ~= ARGV[2] then return 2 end
local busy = 0
for i = 9, 16 do busy = busy + redis.call('EXISTS', KEYS[i]) end
if busy > 0 then
  for i = 1, 8 do redis.call('UNLINK', KEYS[i]) end
  redis.call('DEL', KEYS[18])
  return 0
end
local ttl = tonumber(ARGV[1])
local at = nil
if ttl > 0 then at = deadline(ttl) end
for i = 1, 8 do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    redis.call('RENAME', KEYS[i], KEYS[i + 8])
    if at then redis.call('PEXPIREAT', KEYS[i + 8], at) else redis.call('PERSIST', KEYS[i + 8]) end
  end
end
redis.call('DEL', KEYS[18])
bump(KEYS[9], KEYS[13], KEYS[15])
redis.call('SET', marker, '1', 'PX', 600000)
return 1
"""
)

# ARGV: the change stamp the repair was planned against ("" for none), then operations on
# the thread's keys (KEYS index k): "za" k member (ZADD), "zr" k member (ZREM), "hs" k
# field value (HSET), "hd" k field (HDEL), "cas" k field old new (HSET if the field holds
# old). Runs them only if the stamp is unchanged (else nothing: reply false), counts the
# stamp up, gives keys created meanwhile the thread's expiry, and replies the new stamp.
REPAIR = Script(
    LIB
    + r"""
if (redis.call('HGET', KEYS[5], '\255') or '') ~= ARGV[1] then return false end
local i = 2
while i <= #ARGV do
  local op, k = ARGV[i], KEYS[tonumber(ARGV[i + 1])]
  if op == 'za' then
    redis.call('ZADD', k, 0, ARGV[i + 2])
  elseif op == 'zr' then
    redis.call('ZREM', k, ARGV[i + 2])
  elseif op == 'hs' then
    redis.call('HSET', k, ARGV[i + 2], ARGV[i + 3])
    i = i + 1
  elseif op == 'hd' then
    redis.call('HDEL', k, ARGV[i + 2])
  elseif op == 'cas' then
    if redis.call('HGET', k, ARGV[i + 2]) == ARGV[i + 3] then
      redis.call('HSET', k, ARGV[i + 2], ARGV[i + 4])
    end
    i = i + 2
  end
  i = i + 3
end
bump(KEYS[1], KEYS[5], KEYS[7])
local ttl = -1
for j = 1, 8 do ttl = math.max(ttl, redis.call('PTTL', KEYS[j])) end
if ttl > 0 then
  for j = 1, 8 do
    if redis.call('PTTL', KEYS[j]) == -1 then redis.call('PEXPIRE', KEYS[j], ttl) end
  end
end
return redis.call('HGET', KEYS[5], '\255') or ''
"""
)

# 2: records, values and writes are sealed (a CRC each: _integrity.seal), refs counts each
# checkpoint's writes. Layout-1 keys are read as they are; opening read-write upgrades the
# version key, so that an older statekeeper refuses the prefix instead of misreading it.
# 3: the thread index, built from the threads when a read-write open upgrades.
# 4: the checkpoint index across threads (and declared metadata indexes), built from the
# threads' ids indexes when a read-write open upgrades (statekeeper.backends.redis._index).
LAYOUT_VERSION = 4

# KEYS: the layout key. ARGV: this layout's version. Stores it where there is none or an
# older one (the upgrade: older keys stay readable); replies what the key held (false:
# nothing), which the caller checks. Writes nothing when the key is current, so opening
# a read-only replica whose data is current works.
LAYOUT = Script(
    r"""
local held = redis.call('GET', KEYS[1])
if not held or (string.find(held, '^%d+$') and tonumber(held) < tonumber(ARGV[1])) then
  redis.call('SET', KEYS[1], ARGV[1])
end
return held
"""
)

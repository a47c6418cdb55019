-- Functions every thread script of the Redis checkpointer starts with (statekeeper.backends.redis._lua).
-- KEYS are the thread's keys in the order of THREAD_KEYS; see docs/redis.md for the layout.

-- one length-prefixed part of s at pos, and the position after it; nil if there is none
local function part(s, pos)
  local colon = string.find(s, ':', pos, true)
  if not colon then return nil end
  local n = tonumber(string.sub(s, pos, colon - 1))
  if not n or n < 0 or colon + n > #s then return nil end
  return string.sub(s, colon + 1, colon + n), colon + n + 1
end

-- run part, referenced fields (loaded ones first), number loaded, parent id, and where
-- the parts after the parent begin; nil for a record whose header cannot be read
-- (damaged: the reader reports it). A sealed record (layout 2) starts with the byte 254
-- and 4 bytes of CRC, which Lua does not check.
local function header(rec)
  local pos = 1
  if string.byte(rec, 1) == 254 then pos = 6 end
  local run, nload, nextra
  run, pos = part(rec, pos)
  if not run then return nil end
  nload, pos = part(rec, pos)
  if not nload then return nil end
  nextra, pos = part(rec, pos)
  nload, nextra = tonumber(nload), tonumber(nextra)
  if not nload or not nextra or nload < 0 or nextra < 0 then return nil end
  local fields = {}
  for i = 1, nload + nextra do
    fields[i], pos = part(rec, pos)
    if not fields[i] then return nil end
  end
  local parent, after = part(rec, pos)
  if not parent then return nil end
  return run, fields, nload, parent, after
end

-- the metadata JSON of a record (the part after its type and codec), false if it cannot
-- be read. Unchecked (Lua checks no CRC): callers only use it to find the index entries
-- of a checkpoint they deleted, which name that checkpoint whatever its metadata says.
local function metadata_of(rec)
  local _, _, _, _, pos = header(rec)
  if not pos then return false end
  local found
  for _ = 1, 3 do
    found, pos = part(rec, pos)
    if not found then return false end
  end
  return found
end

-- an error reply naming a damaged field (hex: fields are binary)
local function damaged(key, field)
  local hex = string.gsub(field, '.', function(c) return string.format('%02x', string.byte(c)) end)
  return redis.error_reply('STATEKEEPER-DAMAGED ' .. key .. ' ' .. hex)
end

local function enc(s)
  return (string.gsub(s, '%z', '\0\255')) .. '\0\1'
end

-- E(a) E(b) -> E(b) E(a)
local function swap(m)
  local i = string.find(m, '\0\1', 1, true)
  return string.sub(m, i + 2) .. string.sub(m, 1, i + 1)
end

local function hmget(key, fields, first, last)
  local out = {}
  for i = first, last, 500 do
    local chunk = redis.call('HMGET', key, unpack(fields, i, math.min(i + 499, last)))
    for j = 1, #chunk do out[#out + 1] = chunk[j] end
  end
  return out
end

local function writes_of(ref)
  local fields = redis.call('ZRANGE', KEYS[7], '[' .. ref, '(' .. ref .. '\255', 'BYLEX')
  local out = {}
  if #fields > 0 then
    local values = hmget(KEYS[6], fields, 1, #fields)
    for i = 1, #fields do
      out[2 * i - 1] = fields[i]
      out[2 * i] = values[i]
    end
  end
  return out
end

-- the server's time + ttl ms, as an integer string for PEXPIREAT
local function deadline(ttl)
  local now = redis.call('TIME')
  local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  return string.format('%.0f', ms + ttl)
end

-- all thread keys expire together (one deadline), or never (ttl 0). Called after bump():
-- refs then exists and has the thread's expiry (every write sets the stamp in it, and a
-- refs the stamp creates gets the thread's expiry), so its PTTL tells whether the thread
-- had one.
local function expire(ttl)
  ttl = tonumber(ttl)
  if ttl > 0 then
    local at = deadline(ttl)
    for i = 1, 8 do redis.call('PEXPIREAT', KEYS[i], at) end
  elseif ttl == 0 and redis.call('PTTL', KEYS[5]) >= 0 then
    for i = 1, 8 do redis.call('PERSIST', KEYS[i]) end  -- a saver with a ttl wrote before
  end
end

-- on a standalone server the registry of threads is KEYS[9] and the count of its members
-- KEYS[10], updated in the same script (ARGV[2] score, ARGV[3] member); in a Cluster they
-- are in another slot, updated before (the REGISTER script)
local function register()
  if #KEYS > 8 and redis.call('ZADD', KEYS[9], ARGV[2], ARGV[3]) == 1 then
    redis.call('INCR', KEYS[10])
  end
end

-- Next to the reference counts, the refs hash holds for each value field f the field
-- of the value it is a delta on ('\254' .. f) and its CRC ('\255' .. f), so that scripts
-- never read values themselves: moving a large value through Lua is slow; and for each
-- checkpoint (ref) how many pending writes it has ('\253' .. ref), so that a write whose
-- wix member or whole wix key is gone is noticed.

-- drop one reference to each field; a value nothing references any more is deleted,
-- and so is the reference it held on its base
local function release(fields)
  local i = 1
  while i <= #fields do
    local f = fields[i]
    if redis.call('HINCRBY', KEYS[5], f, -1) <= 0 then
      local b = redis.call('HGET', KEYS[5], '\254' .. f)
      if b then fields[#fields + 1] = b end
      redis.call('HDEL', KEYS[5], f, '\254' .. f, '\255' .. f)
      redis.call('HDEL', KEYS[4], f)
    end
    i = i + 1
  end
end

-- store a value (base field and crc may be ''); a delta holds a reference on its base.
-- Only a value stored again (a retried put) can have an old base and crc to replace.
local function set_value(f, v, base, crc)
  local old = false
  if redis.call('HSET', KEYS[4], f, v) == 0 then
    old = redis.call('HGET', KEYS[5], '\254' .. f)
    redis.call('HDEL', KEYS[5], '\254' .. f, '\255' .. f)
  end
  if base ~= '' then
    redis.call('HINCRBY', KEYS[5], base, 1)
    redis.call('HSET', KEYS[5], '\254' .. f, base, '\255' .. f, crc)
  elseif crc ~= '' then
    redis.call('HSET', KEYS[5], '\255' .. f, crc)
  end
  if old then release({old}) end
end

-- A value and the bases it is a delta on, nearest first ({} for a version without a
-- value). A link is the stored value, or {field} for a value longer than INLINE bytes
-- (the caller HMGETs it: large values are slow through Lua), or {field, 'm'} for a value
-- already in this reply, or {field, '='} for a value whose CRC is the one the caller says
-- it holds (known[field]), or {field, 'x'} for a value missing from blobs, or {field, 'z'}
-- for one emptied, while refs still has its CRC (damage; a version never stored has no
-- CRC: no value): the chain stops at those.
local INLINE = 65536
local sent, known = {}, {}
local function chain(f)
  local out = {}
  for i = 1, 64 do
    if sent[f] then
      out[i] = {f, 'm'}
      break
    end
    if known[f] and redis.call('HGET', KEYS[5], '\255' .. f) == known[f] then
      out[i] = {f, '='}
      break
    end
    local n = redis.call('HSTRLEN', KEYS[4], f)
    if n == 0 then  -- no value, unless refs still has its CRC: then it was deleted
      if redis.call('HEXISTS', KEYS[5], '\255' .. f) == 1 then
        out[i] = {f, 'z'}
        if redis.call('HEXISTS', KEYS[4], f) == 0 then out[i][2] = 'x' end
      end
      break
    end
    sent[f] = true
    if n <= INLINE then out[i] = redis.call('HGET', KEYS[4], f) else out[i] = {f} end
    f = redis.call('HGET', KEYS[5], '\254' .. f)
    if not f then break end
  end
  return out
end

-- Count up the change stamp of the thread whose ids, refs and wix keys are given (the
-- field '\255' of refs, see the module docstring); a thread with no checkpoints and no
-- writes left drops it (`live`: the caller just wrote some). A refs hash the stamp
-- creates gets the thread's expiry.
local function bump(ids, refs, wix, live)
  if not live and redis.call('EXISTS', ids) == 0 and redis.call('EXISTS', wix) == 0 then
    redis.call('HDEL', refs, '\255')
    return
  end
  local old = redis.call('HGET', refs, '\255')
  local epoch, n, fresh
  if old then
    local c = string.find(old, ':', 1, true)
    epoch, n, fresh = string.sub(old, 1, c - 1), tonumber(string.sub(old, c + 1)), false
  else
    local now = redis.call('TIME')
    epoch, n, fresh = now[1] .. '.' .. now[2], 0, redis.call('EXISTS', refs) == 0
  end
  redis.call('HSET', refs, '\255', epoch .. ':' .. string.format('%d', n + 1))
  if fresh then
    local ms = redis.call('PTTL', ids)
    if ms < 0 then ms = redis.call('PTTL', wix) end
    if ms > 0 then redis.call('PEXPIRE', refs, ms) end
  end
end

-- delete one checkpoint, its writes, and the values nothing references any more; returns
-- its record (false: there was none). A record whose header cannot be read releases
-- nothing: its values stay (counted too high, which verify reports and repairs), rather
-- than risk releasing the wrong ones.
local function drop(ref)
  local rec = redis.call('HGET', KEYS[3], ref)
  if not rec then return false end
  local run, fields = header(rec)
  if fields then release(fields) end
  if run and run ~= '' then redis.call('ZREM', KEYS[8], run .. ref) end
  redis.call('HDEL', KEYS[5], '\253' .. ref)
  redis.call('HDEL', KEYS[3], ref)
  redis.call('ZREM', KEYS[1], swap(ref))
  redis.call('ZREM', KEYS[2], ref)
  local wf = redis.call('ZRANGE', KEYS[7], '[' .. ref, '(' .. ref .. '\255', 'BYLEX')
  for i = 1, #wf do redis.call('HDEL', KEYS[6], wf[i]) end
  if #wf > 0 then redis.call('ZREMRANGEBYLEX', KEYS[7], '[' .. ref, '(' .. ref .. '\255') end
  return rec
end

-- the reply of a deletion: each deleted checkpoint's ref, and its metadata JSON when
-- `want` is '1' (else false), so the caller can remove its index entries
local function deleted(out, ref, rec, want)
  out[#out + 1] = ref
  out[#out + 1] = want == '1' and metadata_of(rec)
end

-- The thread index (docs/redis.md): a sorted set z of members E(newest root checkpoint
-- id) E(thread id), all scored 0, and a hash h from E(thread id) to its member, both in
-- the registry's slot. Which of two members is newer is asked of z (its lex order is byte
-- order; Lua's string comparison follows the server's locale). `force`: set it even if
-- older (a thread whose newest checkpoints were deleted).
local function index_head(z, h, field, member, force)
  local old = redis.call('HGET', h, field)
  if old == member then return end
  redis.call('ZADD', z, 0, member)
  if old then
    local was = redis.call('ZRANK', z, old)
    if was and not force and was > redis.call('ZRANK', z, member) then
      redis.call('ZREM', z, member)
      return
    end
    redis.call('ZREM', z, old)
  end
  redis.call('HSET', h, field, member)
end

local function unindex_head(z, h, field)
  local old = redis.call('HGET', h, field)
  if old then redis.call('ZREM', z, old) end
  redis.call('HDEL', h, field)
end

-- Frozen: format 4's script (includes pasted), as the version before packed ids ran it.
--[[
  Schedule entries in one shard: ZADD of the id with its due time plus HSET of its message, stored
  behind an arrival stamp (includes/stamp.lua): entries due at the same instant keep send order.

  KEYS[1] due           ZSET id -> due ms
  KEYS[2] msg           HASH id -> encoded message
  KEYS[3] wake          STRING the leader's planned wake-up (ms)
  KEYS[4] pending_keys  HASH idempotency key -> pending id
  KEYS[5] id_keys       HASH id -> idempotency key
  KEYS[6] layout        STRING the shard count writes must be routed with (absent: any)

  ARGV[1] wake channel, ARGV[2] shard number, ARGV[3] '1' to replace what is pending,
  ARGV[4] the shard count the caller routed with
  ARGV[5..] groups of four: id, due ms, message, idempotency key ('' for none)

  Refuses the whole call with the error "ZSET_LAYOUT <count>" when the shard's layout says another
  count (a reshard began or ended): the caller reads the store's layout and routes again, so no
  write lands behind a reshard that has already passed its shard.

  Returns one value per entry:
    1          scheduled
    0          the same id is already pending (nothing changed: scheduling twice is a no-op)
    2          replaced the pending entry of that id (ARGV[3] = '1')
    "<id>"     another pending entry holds the same idempotency key (nothing changed)

  A chunk without idempotency keys and without replace (every bulk call) takes the batched path:
  one ZMSCORE, one ZADD and one HSET for the whole chunk instead of three calls per entry, with the
  same results as the entry-by-entry path (a repeated id within the chunk is "already pending").
  Needs Redis >= 6.2 (ZMSCORE). A call carries at most ~1900 entries (unpack() limit; the
  store sends 500).

  An id that is only in flight (claimed, not yet acked) is not pending: scheduling it again is a new
  incarnation (a retry published by the worker before the dispatcher acked), so its message is
  overwritten rather than kept, or the retry would be lost.
]]
-- Wake a sleeping leader when an entry becomes due before the wake-up it planned.
-- The leader writes its planned wake-up time (ms) to the shard's wake key before sleeping;
-- deleting the key makes sure a burst of early schedules publishes once, not once each.
local function wake_if_earlier(wake_key, channel, shard, score)
  local planned = redis.call('GET', wake_key)
  if planned and score < tonumber(planned) then
    redis.call('DEL', wake_key)
    redis.call('PUBLISH', channel, shard)
  end
end
-- Drop the idempotency-key bookkeeping of an entry that stops being pending.
local function forget_key(pending_keys, id_keys, id)
  local key = redis.call('HGET', id_keys, id)
  if key then
    redis.call('HDEL', id_keys, id)
    if redis.call('HGET', pending_keys, key) == id then
      redis.call('HDEL', pending_keys, key)
    end
  end
end
-- The arrival stamp stored in front of every message: a marker byte, then Redis TIME (seconds and
-- microseconds) and the entry's place in its call, big-endian, so that entries due at the same
-- instant are handed off in the order they reached the store, whatever their shard.
local function stamp(t, j)
  return '\1' .. struct.pack('>I4I4I2', tonumber(t[1]), tonumber(t[2]), j)
end
local due, msg, wake, pending_keys, id_keys = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local channel, shard, replace = ARGV[1], ARGV[2], ARGV[3] == '1'
local layout = redis.call('GET', KEYS[6])
if layout and layout ~= ARGV[4] then
  return redis.error_reply('ZSET_LAYOUT ' .. layout)
end
local count = (#ARGV - 4) / 4
local results = {}
local earliest = nil
local arrived = redis.call('TIME')

-- Entry j is ARGV[4j + 1] id, ARGV[4j + 2] due ms, ARGV[4j + 3] message, ARGV[4j + 4] idempotency key.
local batched = not replace
for j = 1, count do
  if ARGV[4 * j + 4] ~= '' then
    batched = false
    break
  end
end

if batched and count > 0 then
  local ids = {}
  for j = 1, count do ids[j] = ARGV[4 * j + 1] end
  local current = redis.call('ZMSCORE', due, unpack(ids))
  local zadd, hset, seen = {}, {}, {}
  for j = 1, count do
    local id = ids[j]
    if current[j] or seen[id] then
      results[j] = 0
    else
      seen[id] = true
      local score = ARGV[4 * j + 2]
      zadd[#zadd + 1] = score
      zadd[#zadd + 1] = id
      hset[#hset + 1] = id
      hset[#hset + 1] = stamp(arrived, j)  .. ARGV[4 * j + 3]
      score = tonumber(score)
      if earliest == nil or score < earliest then earliest = score end
      results[j] = 1
    end
  end
  if #zadd > 0 then
    redis.call('ZADD', due, unpack(zadd))
    redis.call('HSET', msg, unpack(hset))
  end
else
  for i = 5, #ARGV, 4 do
    local id, score, payload, ikey = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3]
    local result = nil
    if ikey ~= '' then
      local holder = redis.call('HGET', pending_keys, ikey)
      if holder and holder ~= id and redis.call('ZSCORE', due, holder) then
        if replace then
          redis.call('ZREM', due, holder)
          redis.call('HDEL', msg, holder)
          forget_key(pending_keys, id_keys, holder)
        else
          result = holder
        end
      end
    end
    if result == nil then
      if redis.call('ZSCORE', due, id) then
        if replace then
          forget_key(pending_keys, id_keys, id)
          result = 2
        else
          result = 0
        end
      else
        result = 1
      end
      if result ~= 0 then
        redis.call('ZADD', due, score, id)
        redis.call('HSET', msg, id, stamp(arrived, (i - 5) / 4 + 1) .. payload)
        if ikey ~= '' then
          redis.call('HSET', pending_keys, ikey, id)
          redis.call('HSET', id_keys, id, ikey)
        end
        if earliest == nil or score < earliest then earliest = score end
      end
    end
    results[#results + 1] = result
  end
end

if earliest ~= nil then
  wake_if_earlier(wake, channel, shard, earliest)
end
return results

--[[
  Revoke ids in one shard: cancel what is pending, and record what is not, so that no dispatcher
  publishes it and an installed worker drops it when it arrives (I10).

  KEYS[1] due, KEYS[2] msg, KEYS[3] inflight, KEYS[4] pending_keys, KEYS[5] id_keys,
  KEYS[6] revoked  ZSET id -> expiry (ms) of the revoke record
  KEYS[7] revoked_gen  STRING counter, INCR on every call that records: a dispatcher holding
          entries claimed at an earlier count reads the records of its batch again before it publishes
  KEYS[8] big  HASH the marks of values over 64 KB (includes/big.lua)
  ARGV[1] revoke channel, ARGV[2] ttl of a record (ms), ARGV[3] most records kept in this shard,
  ARGV[4] '1' to record ids this shard does not hold ('0': the caller looks in other shards first),
  ARGV[5..] members (model/ids.py): the record is written under the member as given (a
  canonical UUID packed, as the claim finds it); the text an older version stored a UUID as is
  cancelled too, and the announcement names the ids as text

  A pending entry is cancelled. An in-flight one (claimed, being published) is removed from
  `inflight` with its message, so no release or reap can put it back in `due`, and recorded: the
  hand-off checks the records at the moment it publishes, and a copy that got out (published, not
  yet acked) is dropped by the worker. An id pending again while an earlier copy is in flight (a
  retry scheduled before the ack) is both cancelled and recorded. Records expire after the ttl and
  are capped per shard (the ones closest to expiry are dropped first); every id recorded here is
  published on the revoke channel as a JSON array (the ttl in ms, then the list of ids), for
  running workers.

  Returns one value per id: 1 cancelled, 2 cancelled and recorded (a copy was in flight),
  -1 in flight (removed and recorded), 3 not in this shard (recorded), 0 not in this shard.
]]
--- @include "now"
--- @include "forget_key"
--- @include "ids"
--- @include "big"

local due, msg, inflight, pending_keys, id_keys, revoked = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local revoked_gen, big = KEYS[7], KEYS[8]
local ttl, most, record_unknown = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1'
local now = now_ms()
local results, recorded = {}, {}

local function take(id)
  local pending = redis.call('ZREM', due, id) == 1
  local flying = redis.call('ZREM', inflight, id) == 1
  if pending or flying then
    redis.call('HDEL', msg, id)
    unmark_big(big, {id})
    forget_key(pending_keys, id_keys, id)
  end
  return pending, flying
end

for i = 5, #ARGV do
  local id = ARGV[i]
  local pending, flying = take(id)
  local legacy = legacy_of(id)
  if legacy then  -- the same id as an older version stored it
    local was_pending, was_flying = take(legacy)
    pending, flying = pending or was_pending, flying or was_flying
  end
  local result
  if flying then
    result = pending and 2 or -1
  elseif pending then
    result = 1
  else
    result = record_unknown and 3 or 0
  end
  if result ~= 1 and result ~= 0 then
    redis.call('ZADD', revoked, now + ttl, id)
    recorded[#recorded + 1] = id_text(id)
  end
  results[#results + 1] = result
end

if #recorded > 0 then
  redis.call('ZREMRANGEBYSCORE', revoked, '-inf', now)
  local excess = redis.call('ZCARD', revoked) - most
  if excess > 0 then redis.call('ZPOPMIN', revoked, excess) end
  redis.call('INCR', revoked_gen)
  redis.call('PUBLISH', ARGV[1], cjson.encode({ttl, recorded}))
end
return results

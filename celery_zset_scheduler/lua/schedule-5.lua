--[[
  Schedule entries in one shard: ZADD of the id with its due time plus HSET of its message.

  KEYS[1] due           ZSET id -> due ms
  KEYS[2] msg           HASH id -> encoded message
  KEYS[3] wake          STRING the leader's planned wake-up (ms)
  KEYS[4] pending_keys  HASH idempotency key -> pending id
  KEYS[5] id_keys       HASH id -> idempotency key

  ARGV[1] wake channel, ARGV[2] shard number, ARGV[3] '1' to replace what is pending
  ARGV[4..] groups of four: id, due ms, message, idempotency key ('' for none)

  Returns one value per entry:
    1          scheduled
    0          the same id is already pending (nothing changed: scheduling twice is a no-op)
    2          replaced the pending entry of that id (ARGV[3] = '1')
    "<id>"     another pending entry holds the same idempotency key (nothing changed)

  An id that is only in flight (claimed, not yet acked) is not pending: scheduling it again is a new
  incarnation (a retry published by the worker before the dispatcher acked), so its message is
  overwritten rather than kept, or the retry would be lost.
]]
--- @include "now"
--- @include "wake"
--- @include "forget_key"

local due, msg, wake, pending_keys, id_keys = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local channel, shard, replace = ARGV[1], ARGV[2], ARGV[3] == '1'
local results = {}
local earliest = nil

for i = 4, #ARGV, 4 do
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
      redis.call('HSET', msg, id, payload)
      if ikey ~= '' then
        redis.call('HSET', pending_keys, ikey, id)
        redis.call('HSET', id_keys, id, ikey)
      end
      if earliest == nil or score < earliest then earliest = score end
    end
  end
  results[#results + 1] = result
end

if earliest ~= nil then
  wake_if_earlier(wake, channel, shard, earliest)
end
return results

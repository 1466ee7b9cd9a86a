--[[
  Add (or replace) a dead letter and trim the store to its caps, in one step.

  KEYS[1] dlq_index  ZSET id -> dead-lettered time (ms)
  KEYS[2] dlq_data   HASH id -> JSON record
  ARGV[1] id, ARGV[2] record, ARGV[3] most entries kept, ARGV[4] longest age kept (ms)

  Trimming removes at most 1000 entries a call, so an add never blocks Redis for long even after
  the caps were lowered; later adds finish the job. It runs before the add, so on a full store a
  trim that frees memory lets the add through.
  Returns {dead-lettered time ms, number trimmed}.
]]
--- @include "now"

local index, data = KEYS[1], KEYS[2]
local now = now_ms()
local trimmed = 0
local old = redis.call('ZRANGEBYSCORE', index, '-inf', '(' .. (now - tonumber(ARGV[4])), 'LIMIT', 0, 1000)
for i = 1, #old do
  redis.call('ZREM', index, old[i])
  redis.call('HDEL', data, old[i])
  trimmed = trimmed + 1
end
-- One place is kept for the new letter (unless it replaces one with the same id).
local adding = redis.call('ZSCORE', index, ARGV[1]) and 0 or 1
local excess = redis.call('ZCARD', index) + adding - tonumber(ARGV[3])
if excess > 0 then
  local victims = redis.call('ZRANGE', index, 0, math.min(excess, 1000) - 1)
  for i = 1, #victims do
    redis.call('ZREM', index, victims[i])
    redis.call('HDEL', data, victims[i])
    trimmed = trimmed + 1
  end
end
redis.call('HSET', data, ARGV[1], ARGV[2])
redis.call('ZADD', index, now, ARGV[1])
return {now, trimmed}

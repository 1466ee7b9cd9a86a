--[[
  Return in-flight entries whose lease expired (a dispatcher died between claim and ack) to `due`,
  due now (leader only, fenced like claim).

  KEYS[1] inflight, KEYS[2] due, KEYS[3] msg, KEYS[4] lock, KEYS[5] epoch
  ARGV[1] leader token, ARGV[2] leader epoch, ARGV[3] most entries to reap

  An id already pending again (a newer incarnation) keeps its own due time.
  Returns {0} when fenced, else {1, {reaped ids}}.
]]
--- @include "now"

local inflight, due, msg, lock, epoch = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
if redis.call('GET', lock) ~= ARGV[1] or redis.call('GET', epoch) ~= ARGV[2] then
  return {0}
end
local now = now_ms()
local expired = redis.call('ZRANGEBYSCORE', inflight, '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
local reaped = {}
for i = 1, #expired do
  local id = expired[i]
  redis.call('ZREM', inflight, id)
  if redis.call('HEXISTS', msg, id) == 1 then
    redis.call('ZADD', due, 'NX', now, id)
    reaped[#reaped + 1] = id
  end
end
return {1, reaped}

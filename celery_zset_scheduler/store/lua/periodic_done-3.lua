--[[
  The worker's report that an occurrence whose end its entry waits for (overlap skip or
  buffer_one) has finished.

  KEYS[1] periodic_run, KEYS[2] periodic_next, KEYS[3] periodic_wake
  ARGV[1] wake channel, ARGV[2] shard number, ARGV[3] entry name, ARGV[4] occurrence id

  Only the entry's current mark, and only for that occurrence, is cleared: a late report of an
  older occurrence changes nothing. When an occurrence is buffered behind it (mark "...|b") the
  entry becomes due now and the leader is woken, so the buffered one starts without a poll.
  Returns 1 when the mark was cleared, else 0.
]]
--- @include "now"
--- @include "wake"

local runs, next_key, pwake = KEYS[1], KEYS[2], KEYS[3]
local mark = redis.call('HGET', runs, ARGV[3])
if not mark or string.match(mark, '^([^|]*)') ~= ARGV[4] then
  return 0
end
redis.call('HDEL', runs, ARGV[3])
if string.sub(mark, -2) == '|b' then
  local now = now_ms()
  redis.call('ZADD', next_key, 'XX', 'LT', now, ARGV[3])
  wake_if_earlier(pwake, ARGV[1], 'p' .. ARGV[2], now)
end
return 1

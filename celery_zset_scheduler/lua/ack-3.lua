--[[
  Forget entries that were published.

  KEYS[1] inflight, KEYS[2] msg, KEYS[3] due
  ARGV ids

  Not fenced on purpose: a message that was published must not be published again, whoever leads
  now. The message is kept when the id is pending again (a retry scheduled in the meantime).
  Returns how many ids were still in flight.
]]
local inflight, msg, due = KEYS[1], KEYS[2], KEYS[3]
local acked = 0
for i = 1, #ARGV do
  local id = ARGV[i]
  acked = acked + redis.call('ZREM', inflight, id)
  if not redis.call('ZSCORE', due, id) then
    redis.call('HDEL', msg, id)
  end
end
return acked

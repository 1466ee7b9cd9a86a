--[[
  Put revoke records moved from another shard (a reshard): each id keeps the later of the two
  expiries when it is recorded here already, and the shard's revoke counter moves so that a
  hand-off under way reads the records again. Safe to repeat.

  KEYS[1] revoked      ZSET id -> expiry (ms)
  KEYS[2] revoked_gen  STRING counter
  ARGV[1..] pairs: id, expiry ms

  Returns how many ids were new here.
]]
local added = 0
for i = 1, #ARGV, 2 do
  added = added + redis.call('ZADD', KEYS[1], 'GT', ARGV[i + 1], ARGV[i])
end
if #ARGV > 0 then
  redis.call('INCR', KEYS[2])
end
return added

--[[
  Move a pending entry to another due time.

  KEYS[1] due, KEYS[2] wake
  ARGV[1] wake channel, ARGV[2] shard, ARGV[3] id, ARGV[4] new due ms
  Returns 1 when moved, 0 when the id is not pending in this shard.
]]
--- @include "wake"

local due, wake = KEYS[1], KEYS[2]
if not redis.call('ZSCORE', due, ARGV[3]) then
  return 0
end
local score = tonumber(ARGV[4])
redis.call('ZADD', due, score, ARGV[3])
wake_if_earlier(wake, ARGV[1], ARGV[2], score)
return 1

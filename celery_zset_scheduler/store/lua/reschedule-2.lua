--[[
  Move a pending entry to another due time.

  KEYS[1] due, KEYS[2] wake
  ARGV[1] wake channel, ARGV[2] shard, ARGV[3] member (model/ids.py; a packed one's text, which an older
  version stored, is tried next), ARGV[4] new due ms
  Returns 1 when moved, 0 when the id is not pending in this shard.
]]
--- @include "wake"
--- @include "ids"

local due, wake = KEYS[1], KEYS[2]
local id = ARGV[3]
if not redis.call('ZSCORE', due, id) then
  id = legacy_of(id)
  if not id or not redis.call('ZSCORE', due, id) then return 0 end
end
local score = tonumber(ARGV[4])
redis.call('ZADD', due, 'XX', score, id)
wake_if_earlier(wake, ARGV[1], ARGV[2], score)
return 1

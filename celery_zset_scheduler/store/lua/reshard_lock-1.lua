--[[
  Hold the reshard lease: take it when free, extend it when this token holds it.

  KEYS[1] reshard_lock  STRING token (PX lease)
  ARGV[1] token, ARGV[2] lease ms

  Returns 1 when held by this token now, 0 when another process holds it.
]]
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[2]))
return 1

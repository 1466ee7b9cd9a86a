--[[
  Give up a shard's lease, only if this token still holds it.

  KEYS[1] lock
  ARGV[1] token
  Returns 1 when released, 0 when the lease was already someone else's or gone.
]]
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0

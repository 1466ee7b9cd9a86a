--[[
  Extend a leader's lease, only while it still holds the lock at the same epoch.

  KEYS[1] lock, KEYS[2] epoch
  ARGV[1] token, ARGV[2] epoch, ARGV[3] lease (ms)
  Returns 1 when renewed, 0 when the lease was lost.
]]
if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('GET', KEYS[2]) == ARGV[2] then
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
  return 1
end
return 0

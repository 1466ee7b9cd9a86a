--[[
  Try to become the leader of a shard.

  KEYS[1] lock, KEYS[2] epoch
  ARGV[1] new random token, ARGV[2] lease (ms)
  Returns the new epoch (the fencing counter, incremented on every change of leader), or 0 when
  another dispatcher holds the lease.
]]
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', tonumber(ARGV[2])) then
  return redis.call('INCR', KEYS[2])
end
return 0

--[[
  Try to become the leader of a shard.

  KEYS[1] lock, KEYS[2] epoch, KEYS[3] wake
  ARGV[1] new random token, ARGV[2] lease (ms)
  Returns the new epoch (the fencing counter, incremented on every change of leader), or 0 when
  another dispatcher holds the lease.

  A free shard's wake key is deleted first: it belonged to the previous leader, and a write that
  frees memory first lets the lease be taken even when the store is full (Redis refuses a script's
  memory-growing command only while the script has written nothing), so a full store can still
  elect the leaders that drain it.
]]
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('DEL', KEYS[3])
redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[2]))
return redis.call('INCR', KEYS[2])

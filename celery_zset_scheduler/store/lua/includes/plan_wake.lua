-- After a claim: when the leader will claim this shard next (the earliest due entry, at most
-- max_wait ms away), written to the wake key so that a schedule due before it publishes a wake-up.
-- The old value is deleted first (on a full store Redis refuses a script's first memory-growing
-- write); a full batch writes none: the leader claims again at once. Returns the earliest score.
local function plan_wake(due, wake, now, max_wait, wake_ttl, full)
  local nxt = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
  local next_claim = now + max_wait
  if nxt[2] and tonumber(nxt[2]) < next_claim then next_claim = tonumber(nxt[2]) end
  redis.call('DEL', wake)
  if not full then
    redis.call('SET', wake, next_claim, 'PX', wake_ttl)
  end
  return nxt[2]
end

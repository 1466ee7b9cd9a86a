-- Whether a shard has live revoke records (score = expiry): expired ones are dropped first, and a
-- shard with none costs one ZCARD.
local function any_live_revokes(revoked, now)
  if redis.call('ZCARD', revoked) == 0 then return false end
  redis.call('ZREMRANGEBYSCORE', revoked, '-inf', now)
  return redis.call('ZCARD', revoked) > 0
end

-- Drop the idempotency-key bookkeeping of an entry that stops being pending.
local function forget_key(pending_keys, id_keys, id)
  local key = redis.call('HGET', id_keys, id)
  if key then
    redis.call('HDEL', id_keys, id)
    if redis.call('HGET', pending_keys, key) == id then
      redis.call('HDEL', pending_keys, key)
    end
  end
end

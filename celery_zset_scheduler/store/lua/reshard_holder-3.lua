--[[
  During a reshard: the entry an idempotency key holds in the key's old shard, if it is still
  pending there or waiting in the shard's moving area (not yet put into its new shard, where the
  schedule script would see it). Reads only.

  KEYS[1] pending_keys  HASH idempotency key -> pending id
  KEYS[2] due           ZSET id -> due ms
  KEYS[3] moving        ZSET id -> due ms
  ARGV[1..] idempotency keys

  Returns one value per key: the holding id, or false.
]]
local found = {}
for i = 1, #ARGV do
  local holder = redis.call('HGET', KEYS[1], ARGV[i])
  if holder and (redis.call('ZSCORE', KEYS[2], holder) or redis.call('ZSCORE', KEYS[3], holder)) then
    found[i] = holder
  else
    found[i] = false
  end
end
return found

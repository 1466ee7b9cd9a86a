--[[
  The entries a reshard took out of a shard and has not dropped yet (what a resumed run moves first).

  KEYS[1] moving      ZSET id -> due ms
  KEYS[2] moving_msg  HASH id -> stored value
  KEYS[3] id_keys     HASH id -> idempotency key
  ARGV[1] most entries returned

  Returns {id, due ms, stored value or false, idempotency key or false} per entry, in due order.
]]
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1, 'WITHSCORES')
local held = {}
for i = 1, #ids, 2 do
  local id = ids[i]
  held[#held + 1] = {id, ids[i + 1], redis.call('HGET', KEYS[2], id) or false, redis.call('HGET', KEYS[3], id) or false}
end
return held

--[[
  Take entries out of a shard to move them to another one (first step of a reshard's move):
  each given id still pending leaves `due` and `msg` for the shard's moving area, where no claim
  sees it, in one atomic step (an id claimed meanwhile is in flight and is not taken).

  KEYS[1] due          ZSET id -> due ms
  KEYS[2] msg          HASH id -> stored value
  KEYS[3] id_keys      HASH id -> idempotency key (read; kept until the entry is dropped)
  KEYS[4] moving       ZSET id -> due ms: entries taken, not yet dropped
  KEYS[5] moving_msg   HASH id -> their stored values
  KEYS[6] big          HASH the marks of values over 64 KB (includes/big.lua; the put marks them again)
  ARGV[1..] ids

  Returns one {id, due ms, stored value or false (an id without its message), idempotency key or
  false} per id taken; ids no longer pending are left out.
]]
--- @include "big"

local due, msg, id_keys, moving, moving_msg, big = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local taken = {}
for i = 1, #ARGV do
  local id = ARGV[i]
  local score = redis.call('ZSCORE', due, id)
  if score then
    local value = redis.call('HGET', msg, id)
    redis.call('ZREM', due, id)
    redis.call('HDEL', msg, id)
    unmark_big(big, {id})
    redis.call('ZADD', moving, score, id)
    if value then redis.call('HSET', moving_msg, id, value) end
    taken[#taken + 1] = {id, score, value or false, redis.call('HGET', id_keys, id) or false}
  end
end
return taken

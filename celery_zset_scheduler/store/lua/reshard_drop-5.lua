--[[
  Forget moved entries in their old shard (last step of a reshard's move), after they were put
  into their new one. Safe to repeat.

  KEYS[1] due           ZSET id -> due ms (an id pending here again keeps its key bookkeeping)
  KEYS[2] moving        ZSET id -> due ms
  KEYS[3] moving_msg    HASH id -> stored value
  KEYS[4] pending_keys  HASH idempotency key -> pending id
  KEYS[5] id_keys       HASH id -> idempotency key
  ARGV[1..] ids

  Returns how many were dropped.
]]
--- @include "forget_key"

local due, moving, moving_msg, pending_keys, id_keys = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local dropped = 0
for i = 1, #ARGV do
  local id = ARGV[i]
  if redis.call('ZREM', moving, id) == 1 then
    dropped = dropped + 1
  end
  redis.call('HDEL', moving_msg, id)
  if not redis.call('ZSCORE', due, id) then
    forget_key(pending_keys, id_keys, id)
  end
end
return dropped

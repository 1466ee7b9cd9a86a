--- @include "call_sliced"
-- A value over BIG_BYTES is marked in the shard's `big` hash (id -> 1) while `msg` holds it, so
-- a claim sizes it with HSTRLEN and reads it only when it takes it (budget.lua): a big entry the
-- byte budget passes over costs no read. Marks are set where values are written and dropped
-- where they are deleted; a stale or a missing mark changes how a claim reads, never what it takes.
local BIG_BYTES = 65536
local function mark_big(big, id, value)
  if #value > BIG_BYTES then redis.call('HSET', big, id, 1) end
end

local function unmark_big(big, ids)
  if #ids > 0 and redis.call('EXISTS', big) == 1 then call_sliced('HDEL', big, ids) end
end

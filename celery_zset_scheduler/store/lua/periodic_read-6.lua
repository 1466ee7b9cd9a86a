--[[
  Read one periodic entry with the Redis time, for a read-modify-write or a look.

  KEYS[1] periodic_defs, KEYS[2] periodic_state, KEYS[3] periodic_tpl, KEYS[4] periodic_run,
  KEYS[5] periodic_next, KEYS[6] periodic_plan
  ARGV[1] name
  Returns {now ms, definition or false, state or false, template or false, overlap mark or false,
           next look ms or false, plan or false}.
]]
--- @include "now"

local name = ARGV[1]
return {now_ms(), redis.call('HGET', KEYS[1], name) or false, redis.call('HGET', KEYS[2], name) or false,
        redis.call('HGET', KEYS[3], name) or false, redis.call('HGET', KEYS[4], name) or false,
        redis.call('ZSCORE', KEYS[5], name) or false, redis.call('HGET', KEYS[6], name) or false}

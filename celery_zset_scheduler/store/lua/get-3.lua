--[[
  Look up one entry.

  KEYS[1] due, KEYS[2] inflight, KEYS[3] msg
  ARGV[1] member (model/ids.py); a packed one's text, which an older version stored, is tried next
  Returns {} when absent, else {state, score, message}; state is 'pending' (score = due ms) or
  'inflight' (score = lease deadline ms).
]]
--- @include "ids"

local function find(id)
  local score = redis.call('ZSCORE', KEYS[1], id)
  if score then return score, 'pending' end
  score = redis.call('ZSCORE', KEYS[2], id)
  if score then return score, 'inflight' end
  return nil
end

local id = ARGV[1]
local score, state = find(id)
local legacy = legacy_of(id)
if not score and legacy then
  id = legacy
  score, state = find(id)
end
if not score then
  return {}
end
return {state, score, redis.call('HGET', KEYS[3], id) or false}

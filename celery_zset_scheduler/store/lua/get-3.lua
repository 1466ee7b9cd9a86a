--[[
  Look up one entry.

  KEYS[1] due, KEYS[2] inflight, KEYS[3] msg
  ARGV[1] id
  Returns {} when absent, else {state, score, message}; state is 'pending' (score = due ms) or
  'inflight' (score = lease deadline ms).
]]
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
local state = 'pending'
if not score then
  score = redis.call('ZSCORE', KEYS[2], ARGV[1])
  state = 'inflight'
end
if not score then
  return {}
end
return {state, score, redis.call('HGET', KEYS[3], ARGV[1]) or false}

--[[
  Return claimed but unpublished entries to `due` with their original due time
  (the broker refused them, or the dispatcher is stopping before publishing them).

  KEYS[1] inflight, KEYS[2] due
  ARGV triples: id, the lease deadline (ms) its claim returned, due ms
  Only an id still in flight under that claim goes back, so running this twice changes nothing.
  Returns how many entries went back.
]]
local inflight, due = KEYS[1], KEYS[2]
local released = 0
for i = 1, #ARGV, 3 do
  local score = redis.call('ZSCORE', inflight, ARGV[i])
  if score and tonumber(score) == tonumber(ARGV[i + 1]) then
    redis.call('ZREM', inflight, ARGV[i])
    redis.call('ZADD', due, 'NX', ARGV[i + 2], ARGV[i])
    released = released + 1
  end
end
return released

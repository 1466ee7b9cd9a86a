--[[
  Return claimed but unpublished entries to `due` with their original due time
  (the broker refused them, or the dispatcher is stopping before publishing them).

  KEYS[1] inflight, KEYS[2] due
  ARGV pairs: id, due ms
  Returns how many entries went back.
]]
local inflight, due = KEYS[1], KEYS[2]
local released = 0
for i = 1, #ARGV, 2 do
  if redis.call('ZREM', inflight, ARGV[i]) == 1 then
    redis.call('ZADD', due, 'NX', ARGV[i + 1], ARGV[i])
    released = released + 1
  end
end
return released

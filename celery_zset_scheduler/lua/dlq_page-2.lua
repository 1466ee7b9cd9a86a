--[[
  One page of dead letters, newest first, after a cursor (the last (time, id) returned).

  KEYS[1] index, KEYS[2] data
  ARGV[1] cursor time ('' for the first page), ARGV[2] cursor id, ARGV[3] newest time (ms) to list,
  ARGV[4] oldest time (ms) to list, ARGV[5] limit
  Returns {{ids}, {times}, {records}}.
]]
local index, data = KEYS[1], KEYS[2]
local after_score, after_id = ARGV[1], ARGV[2]
local newest, oldest, limit = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local items

if after_score == '' then
  items = redis.call('ZREVRANGEBYSCORE', index, newest, oldest, 'WITHSCORES', 'LIMIT', 0, limit)
else
  local current = redis.call('ZSCORE', index, after_id)
  if current and tonumber(current) == tonumber(after_score) then
    local rank = redis.call('ZREVRANK', index, after_id)
    items = redis.call('ZREVRANGE', index, rank + 1, rank + limit, 'WITHSCORES')
  else
    items = redis.call('ZREVRANGEBYSCORE', index, '(' .. after_score, oldest, 'WITHSCORES', 'LIMIT', 0, limit)
  end
end

local ids, times = {}, {}
for i = 1, #items, 2 do
  if tonumber(items[i + 1]) < oldest then break end
  ids[#ids + 1] = items[i]
  times[#times + 1] = items[i + 1]
end
local records = {}
if #ids > 0 then
  records = redis.call('HMGET', data, unpack(ids))
end
return {ids, times, records}

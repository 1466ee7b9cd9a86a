--[[
  One page of dead letters, newest first, after a cursor (the last (time, id) returned).

  KEYS[1] index, KEYS[2] data
  ARGV[1] cursor time ('' for the first page), ARGV[2] cursor id, ARGV[3] newest time (ms) to list,
  ARGV[4] oldest time (ms) to list, ARGV[5] limit
  When the cursor's entry is gone (requeued, purged), the page starts at its time and skips the ids
  that share it and come before it in this order, so nothing is skipped or repeated.
  Returns {{ids}, {times}, {records}}.
]]
--- @include "bytes_after"
--- @include "call_sliced"

local index, data = KEYS[1], KEYS[2]
local after_score, after_id = ARGV[1], ARGV[2]
local newest, oldest, limit = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local ids, times = {}, {}

local function take(items)
  for i = 1, #items, 2 do
    if #ids >= limit or tonumber(items[i + 1]) < oldest then return false end
    ids[#ids + 1] = items[i]
    times[#times + 1] = items[i + 1]
  end
  return true
end

if after_score == '' then
  take(redis.call('ZREVRANGEBYSCORE', index, newest, oldest, 'WITHSCORES', 'LIMIT', 0, limit))
else
  local current = redis.call('ZSCORE', index, after_id)
  if current and tonumber(current) == tonumber(after_score) then
    local rank = redis.call('ZREVRANK', index, after_id)
    take(redis.call('ZREVRANGE', index, rank + 1, rank + limit, 'WITHSCORES'))
  else
    local cursor, offset = tonumber(after_score), 0
    while #ids < limit do
      local items = redis.call('ZREVRANGEBYSCORE', index, after_score, oldest, 'WITHSCORES', 'LIMIT', offset, limit)
      local kept = {}
      for i = 1, #items, 2 do
        if tonumber(items[i + 1]) < cursor or bytes_after(after_id, items[i]) then
          kept[#kept + 1] = items[i]
          kept[#kept + 1] = items[i + 1]
        end
      end
      if not take(kept) or #items < 2 * limit then break end
      offset = offset + limit
    end
  end
end

local records = {}
if #ids > 0 then
  records = call_sliced('HMGET', data, ids)
end
return {ids, times, records}

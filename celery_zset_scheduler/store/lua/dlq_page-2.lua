--[[
  One page of dead letters, newest first, after a cursor (the last (time, id) returned).

  KEYS[1] dlq_index, KEYS[2] dlq_data
  ARGV[1] cursor time ('' for the first page), ARGV[2] cursor id, ARGV[3] newest time (ms) to list,
  ARGV[4] oldest time (ms) to list, ARGV[5] limit
  See includes/walk.lua for how a cursor whose entry is gone (requeued, purged) is resumed.
  Returns {{ids}, {times}, {records}}.
]]
--- @include "walk"
--- @include "call_sliced"

local ids, times = walk(KEYS[1], true, ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]))
local records = {}
if #ids > 0 then
  records = call_sliced('HMGET', KEYS[2], ids)
end
return {ids, times, records}

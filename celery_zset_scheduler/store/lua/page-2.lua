--[[
  One page of pending entries in due-time order, after a cursor. O(log n + limit): never a scan.

  KEYS[1] due, KEYS[2] msg
  ARGV[1] cursor score ('' for the first page), ARGV[2] cursor member (model/ids.py), ARGV[3] min due ms,
  ARGV[4] max due ms, ARGV[5] limit, ARGV[6] '1' to return the messages too

  The cursor is the last (score, id) returned; see includes/walk.lua for how ties are resumed.
  Returns {{ids}, {scores}, {messages}}.
]]
--- @include "walk"
--- @include "call_sliced"
--- @include "ids"

local after = ARGV[2]
local legacy = ARGV[1] ~= '' and legacy_of(after)
if legacy and not redis.call('ZSCORE', KEYS[1], after) and redis.call('ZSCORE', KEYS[1], legacy) then
  after = legacy  -- the cursor's entry is one an older version wrote (its id as text)
end
local ids, scores = walk(KEYS[1], false, ARGV[1], after, ARGV[3], ARGV[4], tonumber(ARGV[5]))
local payloads = {}
if ARGV[6] == '1' and #ids > 0 then
  payloads = call_sliced('HMGET', KEYS[2], ids)
end
return {ids, scores, payloads}

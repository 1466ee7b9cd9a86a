--[[
  One page of pending entries in due-time order, after a cursor. O(log n + limit): never a scan.

  KEYS[1] due, KEYS[2] msg
  ARGV[1] cursor score ('' for the first page), ARGV[2] cursor id, ARGV[3] min due ms,
  ARGV[4] max due ms, ARGV[5] limit, ARGV[6] '1' to return the messages too

  The cursor is the last (score, id) returned. While that id is still pending at that score the
  page starts right after it by rank. When it is gone (dispatched, cancelled) the page starts at its
  score and skips the ids that share the score and sort before it, so entries with the same due
  time are neither skipped nor repeated either way.
  Returns {{ids}, {scores}, {messages}}.
]]
--- @include "bytes_after"
--- @include "call_sliced"

local due, msg = KEYS[1], KEYS[2]
local after_score, after_id = ARGV[1], ARGV[2]
local min_score, max_score, limit = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local ids, scores, payloads = {}, {}, {}

local function take(items)
  for i = 1, #items, 2 do
    if #ids >= limit or tonumber(items[i + 1]) > max_score then return false end
    ids[#ids + 1] = items[i]
    scores[#scores + 1] = items[i + 1]
  end
  return true
end

if after_score == '' then
  take(redis.call('ZRANGEBYSCORE', due, min_score, max_score, 'WITHSCORES', 'LIMIT', 0, limit))
else
  local current = redis.call('ZSCORE', due, after_id)
  if current and tonumber(current) == tonumber(after_score) then
    local rank = redis.call('ZRANK', due, after_id)
    take(redis.call('ZRANGE', due, rank + 1, rank + limit, 'WITHSCORES'))
  else
    local cursor, offset = tonumber(after_score), 0
    while #ids < limit do
      local items = redis.call('ZRANGEBYSCORE', due, after_score, max_score, 'WITHSCORES', 'LIMIT', offset, limit)
      local kept = {}
      for i = 1, #items, 2 do
        if tonumber(items[i + 1]) > cursor or bytes_after(items[i], after_id) then
          kept[#kept + 1] = items[i]
          kept[#kept + 1] = items[i + 1]
        end
      end
      if not take(kept) or #items < 2 * limit then break end
      offset = offset + limit
    end
  end
end

if ARGV[6] == '1' and #ids > 0 then
  payloads = call_sliced('HMGET', msg, ids)
end
return {ids, scores, payloads}

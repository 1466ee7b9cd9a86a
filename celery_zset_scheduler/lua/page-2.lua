--[[
  One page of pending entries in due-time order, after a cursor. O(log n + limit): never a scan.

  KEYS[1] due, KEYS[2] msg
  ARGV[1] cursor score ('' for the first page), ARGV[2] cursor id, ARGV[3] min due ms,
  ARGV[4] max due ms, ARGV[5] limit, ARGV[6] '1' to return the messages too

  The cursor is the last (score, id) returned. While that id is still pending at that score the
  page starts right after it by rank, so ties on the score are neither skipped nor repeated.
  Returns {{ids}, {scores}, {messages}}.
]]
local due, msg = KEYS[1], KEYS[2]
local after_score, after_id = ARGV[1], ARGV[2]
local min_score, max_score, limit = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local items

if after_score == '' then
  items = redis.call('ZRANGEBYSCORE', due, min_score, max_score, 'WITHSCORES', 'LIMIT', 0, limit)
else
  local current = redis.call('ZSCORE', due, after_id)
  if current and tonumber(current) == tonumber(after_score) then
    local rank = redis.call('ZRANK', due, after_id)
    items = redis.call('ZRANGE', due, rank + 1, rank + limit, 'WITHSCORES')
  else
    items = redis.call('ZRANGEBYSCORE', due, '(' .. after_score, max_score, 'WITHSCORES', 'LIMIT', 0, limit)
  end
end

local ids, scores, payloads = {}, {}, {}
for i = 1, #items, 2 do
  if tonumber(items[i + 1]) > max_score then break end
  ids[#ids + 1] = items[i]
  scores[#scores + 1] = items[i + 1]
end
if ARGV[6] == '1' and #ids > 0 then
  payloads = redis.call('HMGET', msg, unpack(ids))
end
return {ids, scores, payloads}

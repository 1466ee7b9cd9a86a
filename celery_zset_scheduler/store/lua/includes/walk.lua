--[[
  One page of a ZSET after a cursor, in either direction; never a scan (O(log n + limit)).

  walk(key, reverse, after_score, after_id, first, last, limit) returns {ids}, {scores}:
  at most `limit` members with scores from `first` to `last` (inclusive; `first` is the bound the
  walk starts from, so it is the larger one when `reverse`), ordered as ZRANGE (or ZREVRANGE),
  after the cursor (after_score, after_id); after_score '' means the first page.

  While the cursor's member is still there at that score the page starts right after it by rank.
  When it is gone (dispatched, cancelled, purged) the page starts at its score and skips the
  members that share it and come before it byte by byte (Redis' order of ties), so ties are
  neither skipped nor repeated either way. That fallback costs O(members sharing the score).
]]
--- @include "bytes_after"

local function walk(key, reverse, after_score, after_id, first, last, limit)
  local by_score = reverse and 'ZREVRANGEBYSCORE' or 'ZRANGEBYSCORE'
  local stop = tonumber(last)
  local ids, scores = {}, {}

  local function past(score)
    if reverse then return score < stop end
    return score > stop
  end

  local function take(items)
    for i = 1, #items, 2 do
      if #ids >= limit or past(tonumber(items[i + 1])) then return false end
      ids[#ids + 1] = items[i]
      scores[#scores + 1] = items[i + 1]
    end
    return true
  end

  if after_score == '' then
    take(redis.call(by_score, key, first, last, 'WITHSCORES', 'LIMIT', 0, limit))
    return ids, scores
  end
  local current = redis.call('ZSCORE', key, after_id)
  if current and tonumber(current) == tonumber(after_score) then
    local rank = redis.call(reverse and 'ZREVRANK' or 'ZRANK', key, after_id)
    take(redis.call(reverse and 'ZREVRANGE' or 'ZRANGE', key, rank + 1, rank + limit, 'WITHSCORES'))
    return ids, scores
  end
  local cursor, offset = tonumber(after_score), 0
  while #ids < limit do
    local items = redis.call(by_score, key, after_score, last, 'WITHSCORES', 'LIMIT', offset, limit)
    local kept = {}
    for i = 1, #items, 2 do
      local score = tonumber(items[i + 1])
      local later
      if reverse then
        later = score < cursor or bytes_after(after_id, items[i])
      else
        later = score > cursor or bytes_after(items[i], after_id)
      end
      if later then
        kept[#kept + 1] = items[i]
        kept[#kept + 1] = items[i + 1]
      end
    end
    if not take(kept) or #items < 2 * limit then break end
    offset = offset + limit
  end
  return ids, scores
end

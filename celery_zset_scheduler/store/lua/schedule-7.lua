--[[
  Schedule entries in one shard: ZADD of the id with its due time plus HSET of its message, stored
  behind an arrival stamp (includes/stamp.lua): entries due at the same instant keep send order.

  KEYS[1] due           ZSET id -> due ms
  KEYS[2] msg           HASH id -> encoded message
  KEYS[3] wake          STRING the leader's planned wake-up (ms)
  KEYS[4] pending_keys  HASH idempotency key -> pending id
  KEYS[5] id_keys       HASH id -> idempotency key
  KEYS[6] layout        STRING the shard count writes must be routed with (absent: any)
  KEYS[7] big           HASH the marks of values over 64 KB (includes/big.lua)

  ARGV[1] wake channel, ARGV[2] shard number, ARGV[3] '1' to replace what is pending,
  ARGV[4] the shard count the caller routed with, ARGV[5] '1' when the store may hold members an
  older version wrote (format 4 and before: a UUID as its 36-character text), '0' when not
  ARGV[6..] groups of four: member (model/ids.py), due ms, message, idempotency key ('' for none)

  Refuses the whole call with the error "ZSET_LAYOUT <count>" when the shard's layout says another
  count (a reshard began or ended): the caller reads the store's layout and routes again, so no
  write lands behind a reshard that has already passed its shard.

  Returns one value per entry:
    1          scheduled
    0          the same id is already pending (nothing changed: scheduling twice is a no-op)
    2          replaced the pending entry of that id (ARGV[3] = '1')
    "<member>" another pending entry holds the same idempotency key (nothing changed)

  With ARGV[5] = '1' a packed id whose text form is pending counts as pending (replace removes
  that entry): the same id is never pending twice, whichever version wrote it.

  A chunk without idempotency keys and without replace (every bulk call) takes the batched path:
  one ZMSCORE, one ZADD and one HSET for the whole chunk instead of three calls per entry, with the
  same results as the entry-by-entry path (a repeated id within the chunk is "already pending").
  Needs Redis >= 6.2 (ZMSCORE). A call carries at most ~1900 entries (unpack() limit; the
  store sends 500).

  An id that is only in flight (claimed, not yet acked) is not pending: scheduling it again is a new
  incarnation (a retry published by the worker before the dispatcher acked), so its message is
  overwritten rather than kept, or the retry would be lost.
]]
--- @include "wake"
--- @include "forget_key"
--- @include "stamp"
--- @include "ids"
--- @include "big"

local due, msg, wake, pending_keys, id_keys, big = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[7]
local channel, shard, replace, legacy = ARGV[1], ARGV[2], ARGV[3] == '1', ARGV[5] == '1'
local layout = redis.call('GET', KEYS[6])
if layout and layout ~= ARGV[4] then
  return redis.error_reply('ZSET_LAYOUT ' .. layout)
end
local count = (#ARGV - 5) / 4
local results = {}
local earliest = nil
local arrived = redis.call('TIME')

-- Entry j is ARGV[4j + 2] member, ARGV[4j + 3] due ms, ARGV[4j + 4] message, ARGV[4j + 5] idempotency key.
local batched = not replace
for j = 1, count do
  if ARGV[4 * j + 5] ~= '' then
    batched = false
    break
  end
end

if batched and count > 0 then
  local ids = {}
  for j = 1, count do ids[j] = ARGV[4 * j + 2] end
  local current = redis.call('ZMSCORE', due, unpack(ids))
  if legacy then
    local texts, at = {}, {}
    for j = 1, count do
      local text = not current[j] and legacy_of(ids[j])
      if text then texts[#texts + 1] = text; at[#at + 1] = j end
    end
    if #texts > 0 then
      local held = redis.call('ZMSCORE', due, unpack(texts))
      for n = 1, #texts do
        if held[n] then current[at[n]] = held[n] end
      end
    end
  end
  local zadd, hset, seen = {}, {}, {}
  for j = 1, count do
    local id = ids[j]
    if current[j] or seen[id] then
      results[j] = 0
    else
      seen[id] = true
      local score = ARGV[4 * j + 3]
      zadd[#zadd + 1] = score
      zadd[#zadd + 1] = id
      local value = stamp(arrived, j) .. ARGV[4 * j + 4]
      hset[#hset + 1] = id
      hset[#hset + 1] = value
      mark_big(big, id, value)
      score = tonumber(score)
      if earliest == nil or score < earliest then earliest = score end
      results[j] = 1
    end
  end
  if #zadd > 0 then
    redis.call('ZADD', due, unpack(zadd))
    redis.call('HSET', msg, unpack(hset))
  end
else
  for i = 6, #ARGV, 4 do
    local id, score, payload, ikey = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3]
    local result = nil
    local text = legacy and legacy_of(id)
    if ikey ~= '' then
      local holder = redis.call('HGET', pending_keys, ikey)
      if holder and holder ~= id and holder ~= text and redis.call('ZSCORE', due, holder) then
        if replace then
          redis.call('ZREM', due, holder)
          redis.call('HDEL', msg, holder)
          unmark_big(big, {holder})
          forget_key(pending_keys, id_keys, holder)
        else
          result = holder
        end
      end
    end
    if result == nil then
      if text and not redis.call('ZSCORE', due, id) and redis.call('ZSCORE', due, text) then
        -- pending as an older version wrote it: the same id, under its text member
        if replace then
          redis.call('ZREM', due, text)
          redis.call('HDEL', msg, text)
          unmark_big(big, {text})
          forget_key(pending_keys, id_keys, text)
          result = 2
        else
          result = 0
        end
      elseif redis.call('ZSCORE', due, id) then
        if replace then
          forget_key(pending_keys, id_keys, id)
          result = 2
        else
          result = 0
        end
      else
        result = 1
      end
      if result ~= 0 then
        redis.call('ZADD', due, score, id)
        local value = stamp(arrived, (i - 6) / 4 + 1) .. payload
        redis.call('HSET', msg, id, value)
        if result == 2 then unmark_big(big, {id}) end
        mark_big(big, id, value)
        if ikey ~= '' then
          redis.call('HSET', pending_keys, ikey, id)
          redis.call('HSET', id_keys, id, ikey)
        end
        if earliest == nil or score < earliest then earliest = score end
      end
    end
    results[#results + 1] = result
  end
end

if earliest ~= nil then
  wake_if_earlier(wake, channel, shard, earliest)
end
return results

--[[
  Put moved entries into their new shard (second step of a reshard's move), once: each one put is
  marked with the digest of its stored value, so a run resumed after a crash between this step
  and the drop from the old shard puts nothing twice, even if the entry has run since.

  KEYS[1] due           ZSET id -> due ms
  KEYS[2] msg           HASH id -> stored value
  KEYS[3] wake          STRING the leader's planned wake-up (ms)
  KEYS[4] pending_keys  HASH idempotency key -> pending id
  KEYS[5] id_keys       HASH id -> idempotency key
  KEYS[6] moved_in      HASH id -> digest of the value a move put here
  KEYS[7] big           HASH the marks of values over 64 KB (includes/big.lua)
  ARGV[1] wake channel, ARGV[2] shard number
  ARGV[3..] groups of four: id, due ms, stored value (with its arrival stamp), idempotency key ('' for none)

  Returns one value per entry: 1 put, 0 put by an earlier run (nothing done), 2 the id was already
  pending here (scheduled under the new layout meanwhile: that entry is kept, as a second
  schedule of a pending id is a no-op), also under its other member (model/ids.py: a UUID packed,
  or as the text an older version wrote).
]]
--- @include "wake"
--- @include "ids"
--- @include "big"

local due, msg, wake, pending_keys, id_keys, moved_in = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local big = KEYS[7]
local channel, shard = ARGV[1], ARGV[2]
local results, earliest = {}, nil
for i = 3, #ARGV, 4 do
  local id, score, value, ikey = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3]
  local digest = redis.sha1hex(value)
  if redis.call('HGET', moved_in, id) == digest then
    results[#results + 1] = 0
  elseif redis.call('ZSCORE', due, id) or (other_form(id) and redis.call('ZSCORE', due, other_form(id))) then
    redis.call('HSET', moved_in, id, digest)
    results[#results + 1] = 2
  else
    redis.call('ZADD', due, score, id)
    redis.call('HSET', msg, id, value)
    mark_big(big, id, value)
    if ikey ~= '' then
      local holder = redis.call('HGET', pending_keys, ikey)
      if not (holder and holder ~= id and redis.call('ZSCORE', due, holder)) then
        redis.call('HSET', pending_keys, ikey, id)
      end
      redis.call('HSET', id_keys, id, ikey)
    end
    redis.call('HSET', moved_in, id, digest)
    if earliest == nil or score < earliest then earliest = score end
    results[#results + 1] = 1
  end
end
if earliest ~= nil then
  wake_if_earlier(wake, channel, shard, earliest)
end
return results

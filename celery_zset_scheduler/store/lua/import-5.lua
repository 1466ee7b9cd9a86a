--[[
  Import entries moved from a broker's backlog (`celery zset import-eta`) into one shard, each at
  most once: the shard's `imported` hash remembers every id imported, in the same atomic step as
  its scheduling, so a run interrupted between this call and the removal from the broker, then run
  again, never schedules the task a second time (not even once it was dispatched and acked).

  KEYS[1] due       ZSET id -> due ms
  KEYS[2] msg       HASH id -> encoded message
  KEYS[3] wake      STRING the leader's planned wake-up (ms)
  KEYS[4] imported  HASH id -> due ms of every id imported (expires ARGV[3] ms after the last import)
  KEYS[5] big       HASH the marks of values over 64 KB (includes/big.lua)

  ARGV[1] wake channel, ARGV[2] shard number, ARGV[3] how long the import records are kept (ms)
  ARGV[4..] groups of three: member (model/ids.py), due ms, message; a packed id counts as
  imported or pending under its text too (what an older version wrote)

  Returns one value per entry:
    1  imported (scheduled now)
    0  already pending under that id (recorded as imported, nothing else changed)
    2  imported before (nothing changed)
]]
--- @include "wake"
--- @include "stamp"
--- @include "ids"
--- @include "big"

local due, msg, wake, imported, big = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local channel, shard, keep_ms = ARGV[1], ARGV[2], ARGV[3]
local results = {}
local earliest = nil
local arrived = redis.call('TIME')

for i = 4, #ARGV, 3 do
  local id, score, payload = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  local text = legacy_of(id)
  if redis.call('HEXISTS', imported, id) == 1 or (text and redis.call('HEXISTS', imported, text) == 1) then
    results[#results + 1] = 2
  elseif redis.call('ZSCORE', due, id) or (text and redis.call('ZSCORE', due, text)) then
    redis.call('HSET', imported, id, ARGV[i + 1])
    results[#results + 1] = 0
  else
    redis.call('ZADD', due, score, id)
    local value = stamp(arrived, (i - 4) / 3 + 1) .. payload
    redis.call('HSET', msg, id, value)
    mark_big(big, id, value)
    redis.call('HSET', imported, id, ARGV[i + 1])
    if earliest == nil or score < earliest then earliest = score end
    results[#results + 1] = 1
  end
end

if #ARGV > 3 then
  redis.call('PEXPIRE', imported, keep_ms)
end
if earliest ~= nil then
  wake_if_earlier(wake, channel, shard, earliest)
end
return results

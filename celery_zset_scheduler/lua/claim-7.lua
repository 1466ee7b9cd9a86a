--[[
  Claim due entries of one shard for publishing (leader only).

  KEYS[1] due, KEYS[2] msg, KEYS[3] inflight, KEYS[4] lock, KEYS[5] epoch,
  KEYS[6] pending_keys, KEYS[7] id_keys
  ARGV[1] leader token, ARGV[2] leader epoch, ARGV[3] most entries to claim, ARGV[4] lease (ms)

  Fencing (I3): refuses unless the lock still holds this token and the epoch is unchanged.
  Due means due by the Redis server's clock (I5). Each claimed id moves from `due` to `inflight`
  with a lease deadline, so a crash before the ack returns it to `due` (reap), never loses it.

  Returns {0} when fenced, else
    {1, now ms, next due ms or -1, {ids}, {due scores}, {messages}}
  An id found in `due` without a message (should not happen) is dropped from `due`.
]]
--- @include "now"
--- @include "forget_key"

local due, msg, inflight, lock, epoch = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local pending_keys, id_keys = KEYS[6], KEYS[7]

if redis.call('GET', lock) ~= ARGV[1] or redis.call('GET', epoch) ~= ARGV[2] then
  return {0}
end

local now = now_ms()
local deadline = now + tonumber(ARGV[4])
local items = redis.call('ZRANGEBYSCORE', due, '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[3]))
local ids, scores, payloads = {}, {}, {}

for i = 1, #items, 2 do
  local id = items[i]
  redis.call('ZREM', due, id)
  forget_key(pending_keys, id_keys, id)
  local payload = redis.call('HGET', msg, id)
  if payload then
    redis.call('ZADD', inflight, deadline, id)
    ids[#ids + 1] = id
    scores[#scores + 1] = items[i + 1]
    payloads[#payloads + 1] = payload
  end
end

local nxt = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
return {1, now, nxt[2] or -1, ids, scores, payloads}

--[[
  Read the periodic entries of one shard that are due, for the leader to plan (leader only).

  KEYS[1] periodic_next, KEYS[2] periodic_plan, KEYS[3] periodic_state, KEYS[4] periodic_run,
  KEYS[5] due, KEYS[6] inflight, KEYS[7] lock, KEYS[8] epoch, KEYS[9] periodic_wake
  ARGV[1] leader token, ARGV[2] leader epoch, ARGV[3] most entries to read,
  ARGV[4] longest the leader waits before looking again (ms), ARGV[5] ttl of the wake key (ms),
  ARGV[6] how long a handed-over occurrence counts as running without a report of its end (ms)

  Fenced like claim (I3); due by the Redis clock (I5); at most ARGV[3] entries (I4). Nothing is
  changed but the wake key, which records when the leader looks next (the earliest entry, at most
  ARGV[4] ms away): a change due before that publishes "p<shard>" (periodic_write, periodic_done).

  An entry's overlap mark "<id>|<stored ms>[|b]" is outstanding while that occurrence is pending
  or in flight here, or for ARGV[6] ms after it was stored (handed over, not reported finished).

  Returns {0} when fenced, else
    {1, now ms, earliest look ms still ahead or -1, {names}, {scores}, {plans}, {states},
     {outstanding until ms or -1}, {marks or ''}}
  Only the plan (the fields that decide when an entry fires) is read, not the whole definition:
  entries sharing a schedule and policies share the same plan bytes.
  A name in `next` without a state (should not happen) is dropped from `next`.
]]
--- @include "now"
--- @include "ids"

local next_key, plans, states, runs = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local due, inflight, lock, epoch, wake = KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]

if redis.call('GET', lock) ~= ARGV[1] or redis.call('GET', epoch) ~= ARGV[2] then
  return {0}
end

local now = now_ms()
local limit = tonumber(ARGV[3])
local timeout = tonumber(ARGV[6])
local items = redis.call('ZRANGEBYSCORE', next_key, '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
local names, scores, out_defs, out_states, untils, out_marks = {}, {}, {}, {}, {}, {}

if #items > 0 then
  local found = {}
  for i = 1, #items, 2 do found[#found + 1] = items[i] end
  local d = redis.call('HMGET', plans, unpack(found))
  local s = redis.call('HMGET', states, unpack(found))
  local m = redis.call('HMGET', runs, unpack(found))
  for i = 1, #found do
    if d[i] and s[i] then
      local until_ms = -1
      if m[i] then
        local id, stored = string.match(m[i], '^([^|]*)|(%d+)')
        local deadline = tonumber(stored or 0) + timeout
        local packed = id and other_form(id)  -- the mark names the id as text; this version stores it packed
        if id and (redis.call('ZSCORE', due, id) or redis.call('ZSCORE', inflight, id)
                   or (packed and (redis.call('ZSCORE', due, packed) or redis.call('ZSCORE', inflight, packed)))) then
          until_ms = math.max(deadline, now + 1)
        elseif now < deadline then
          until_ms = deadline
        end
      end
      names[#names + 1] = found[i]
      scores[#scores + 1] = items[2 * i]
      out_defs[#out_defs + 1] = d[i]
      out_states[#out_states + 1] = s[i]
      untils[#untils + 1] = until_ms
      out_marks[#out_marks + 1] = m[i] or ''
    else
      redis.call('ZREM', next_key, found[i])
    end
  end
end

local first = redis.call('ZRANGEBYSCORE', next_key, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
local look = now + tonumber(ARGV[4])
if first[2] and tonumber(first[2]) < look then look = tonumber(first[2]) end
-- Deleted first, always: a write that frees memory lets the SET through on a full store (Redis
-- refuses a script's memory-growing command only while the script has written nothing).
redis.call('DEL', wake)
if #items < 2 * limit then  -- a full batch: the leader reads again at once, nothing to plan
  redis.call('SET', wake, look, 'PX', tonumber(ARGV[5]))
end
return {1, now, first[2] or -1, names, scores, out_defs, out_states, untils, out_marks}

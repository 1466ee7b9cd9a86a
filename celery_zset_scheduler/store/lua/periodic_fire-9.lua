--[[
  Store the due occurrences of periodic entries and write each entry's next state, in one atomic
  step per entry (leader only): I11.

  KEYS[1] periodic_next, KEYS[2] periodic_state, KEYS[3] periodic_tpl, KEYS[4] periodic_run,
  KEYS[5] due, KEYS[6] msg, KEYS[7] wake, KEYS[8] lock, KEYS[9] epoch
  ARGV[1] leader token, ARGV[2] leader epoch, ARGV[3] wake channel, ARGV[4] shard number,
  ARGV[5..] one group per entry:
    name, the state it was planned from, the overlap mark it was planned with ('' for none),
    the new state, when to look at it next (ms, '' for never), mark op ('' keep, 'f' point the
    mark at the last occurrence of the group, 'fb' the same and flag a buffered one, 'b' flag the
    existing mark), the number k of occurrences, then k times: member (model/ids.py), due ms,
    message ('' for the entry's template); the mark names the id as text

  Fenced like claim (I3): a deposed or racing leader changes nothing. Each group is a
  compare-and-set: it is written only if the entry's state and mark are still exactly what the
  leader planned from (an API change or another leader's fire in between refuses it; the leader
  reads it again). An occurrence is stored as schedule does (ZADD due + HSET msg; an id already
  pending is left as it is) and an occurrence due before the leader's planned claim publishes a
  wake-up. So an occurrence and the entry's next fire time are written together or not at all:
  neither skipped nor stored twice, whatever crashes or races.

  Returns {0} when fenced, else {1, {per group: -1 refused (stale), else occurrences newly stored}}.
]]
--- @include "now"
--- @include "wake"
--- @include "ids"

local next_key, states, tpls, runs = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local due, msg, wake, lock, epoch = KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]

if redis.call('GET', lock) ~= ARGV[1] or redis.call('GET', epoch) ~= ARGV[2] then
  return {0}
end

local channel, shard = ARGV[3], ARGV[4]
local results, earliest, now = {}, nil, nil
local i = 5
while i <= #ARGV do
  local name, expected, expected_mark = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local state, look, mark_op, k = ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], tonumber(ARGV[i + 6])
  local first = i + 7
  i = first + 3 * k
  local current = redis.call('HGET', states, name)
  local mark = redis.call('HGET', runs, name) or ''
  if current ~= expected or mark ~= expected_mark then
    results[#results + 1] = -1
  else
    local stored, last_id = 0, nil
    local template = nil
    for j = first, first + 3 * (k - 1), 3 do
      local id, score, payload = ARGV[j], tonumber(ARGV[j + 1]), ARGV[j + 2]
      last_id = id
      local text = legacy_of(id)  -- the same occurrence as an older version stored it (its id as text)
      if not redis.call('ZSCORE', due, id) and not (text and redis.call('ZSCORE', due, text)) then
        if payload == '' then
          template = template or redis.call('HGET', tpls, name)
          payload = template
        end
        if payload then
          redis.call('ZADD', due, score, id)
          redis.call('HSET', msg, id, payload)
          stored = stored + 1
          if earliest == nil or score < earliest then earliest = score end
        end
      end
    end
    redis.call('HSET', states, name, state)
    if look == '' then
      redis.call('ZREM', next_key, name)
    else
      redis.call('ZADD', next_key, tonumber(look), name)
    end
    if (mark_op == 'f' or mark_op == 'fb') and last_id then
      now = now or now_ms()
      redis.call('HSET', runs, name, id_text(last_id) .. '|' .. now .. (mark_op == 'fb' and '|b' or ''))
    elseif mark_op == 'b' and mark ~= '' and string.sub(mark, -2) ~= '|b' then
      redis.call('HSET', runs, name, mark .. '|b')
    end
    results[#results + 1] = stored
  end
end

if earliest ~= nil then
  wake_if_earlier(wake, channel, shard, earliest)
end
return {1, results}

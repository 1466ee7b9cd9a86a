--[[
  Create, change or remove one periodic entry (the runtime API, the beat_schedule sync, imports),
  and store occurrences it asks for (run now, backfill), in one atomic step.

  KEYS[1] periodic_names, KEYS[2] periodic_defs, KEYS[3] periodic_state, KEYS[4] periodic_tpl,
  KEYS[5] periodic_next, KEYS[6] periodic_run, KEYS[7] periodic_wake, KEYS[8] due, KEYS[9] msg,
  KEYS[10] wake, KEYS[11] periodic_plan
  ARGV[1] wake channel, ARGV[2] shard number, ARGV[3] name,
  ARGV[4] 'new' (only if the entry does not exist), 'cas' (only if its state is still ARGV[5])
          or 'any', ARGV[5] the expected state,
  ARGV[6] the definition ('' removes the entry), ARGV[7] the message template ('' keeps it),
  ARGV[8] the state, ARGV[9] when the leader looks at it next (ms, '' for never),
  ARGV[10] mark op ('' keep, 'f' point the overlap mark at the last occurrence given),
  ARGV[11] the plan (the fields that decide when it fires; '' with a removal),
  ARGV[12..] occurrences to store, three values each: member (model/ids.py; the
  overlap mark names the id as text), due ms, message ('' for the template)

  Not fenced: anyone may change an entry, as anyone may schedule a task. The compare-and-set
  makes a read-modify-write safe against a leader firing the entry meanwhile (its fire script is
  a compare-and-set on the same state): the loser reads again. A look time earlier than the
  leader's planned one publishes "p<shard>"; an occurrence due before its planned claim publishes
  "<shard>" (wake).

  Returns {1} when written, {0, current state or false} when refused.
]]
--- @include "now"
--- @include "wake"
--- @include "ids"

local names, defs, states, tpls, next_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local runs, pwake, due, msg, wake, plans = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local channel, shard, name, mode, expected = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local definition, template, state, look, mark_op = ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10]

local current = redis.call('HGET', states, name)
if mode == 'new' and redis.call('HEXISTS', defs, name) == 1 then
  return {0, current or false}
end
if mode == 'cas' and current ~= expected then
  return {0, current or false}
end

if definition == '' then
  redis.call('ZREM', names, name)
  redis.call('ZREM', next_key, name)
  redis.call('HDEL', defs, name)
  redis.call('HDEL', plans, name)
  redis.call('HDEL', states, name)
  redis.call('HDEL', tpls, name)
  redis.call('HDEL', runs, name)
  return {1}
end

redis.call('ZADD', names, 0, name)
redis.call('HSET', defs, name, definition)
redis.call('HSET', plans, name, ARGV[11])
if template ~= '' then redis.call('HSET', tpls, name, template) end
redis.call('HSET', states, name, state)
if look == '' then
  redis.call('ZREM', next_key, name)
else
  redis.call('ZADD', next_key, tonumber(look), name)
  wake_if_earlier(pwake, channel, 'p' .. shard, tonumber(look))
end

local earliest, last_id, stored_template = nil, nil, nil
for j = 12, #ARGV, 3 do
  local id, score, payload = ARGV[j], tonumber(ARGV[j + 1]), ARGV[j + 2]
  last_id = id
  local text = legacy_of(id)  -- the same occurrence as an older version stored it (its id as text)
  if not redis.call('ZSCORE', due, id) and not (text and redis.call('ZSCORE', due, text)) then
    if payload == '' then
      stored_template = stored_template or redis.call('HGET', tpls, name)
      payload = stored_template
    end
    if payload then
      redis.call('ZADD', due, score, id)
      redis.call('HSET', msg, id, payload)
      if earliest == nil or score < earliest then earliest = score end
    end
  end
end
if mark_op == 'f' and last_id then
  redis.call('HSET', runs, name, id_text(last_id) .. '|' .. now_ms())
end
if earliest ~= nil then
  wake_if_earlier(wake, channel, shard, earliest)
end
return {1}

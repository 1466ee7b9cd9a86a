--[[
  Claim due entries of one shard, as the claim script does, with Kombu's envelope of each entry
  the fast path's builder can rebuild exactly (for a Redis broker on another server or database).

  KEYS[1] due, KEYS[2] msg, KEYS[3] inflight, KEYS[4] lock, KEYS[5] epoch,
  KEYS[6] pending_keys, KEYS[7] id_keys, KEYS[8] wake, KEYS[9] revoked, KEYS[10] revoked_gen
  (as claim-10.lua), KEYS[11] shared (the shard's shared prefixes: store/shared.py).
  ARGV[1..6] as claim-10.lua, ARGV[7] the route table (fast_push-11.lua's, its list indexes
  naming the broker's lists of the caller's own table instead of KEYS, and no exchanges: bindings
  live on the broker), ARGV[8] this call's delivery tag prefix.

  The claim is the claim script's: every entry moves from `due` to `inflight` with a lease, and is
  forgotten only by the ack after the caller published it (I1, I2). The builder only reads (the
  shard's own `shared` hash, nothing else: a cluster shard's keys share one slot) and runs after
  every write, under pcall: whatever it does, the claim stands. An entry it cannot rebuild (an
  exchange, `expires`, compression, a queue the table does not name...) comes back as stored.

  Returns {0} when fenced, else
    {1, now ms, next due ms or -1, {ids}, {due scores}, {values}, lease deadline ms, {orphan ids},
     {revoked ids}, revoke count, {list index or 0}}
  where a value whose index is not 0 is the entry's arrival stamp (if stored with one) followed
  by its envelope, and one whose index is 0 the value as stored.
]]
--- @include "now"
--- @include "forget_key"
--- @include "call_sliced"
--- @include "live_revokes"
--- @include "ids"
--- @include "envelope"

local due, msg, inflight, lock, epoch = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local pending_keys, id_keys, wake, revoked, revoked_gen = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]

if redis.call('GET', lock) ~= ARGV[1] or redis.call('GET', epoch) ~= ARGV[2] then
  return {0}
end

local now = now_ms()
local deadline = now + tonumber(ARGV[4])
local items = redis.call('ZRANGEBYSCORE', due, '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[3]))
local ids, scores, payloads, orphans, dropped, lists = {}, {}, {}, {}, {}, {}
local any_revoked = any_live_revokes(revoked, now)

if #items > 0 then
  local found = {}
  for i = 1, #items, 2 do found[#found + 1] = items[i] end
  -- The first #found by rank are exactly what the range returned: no id to pass back to Redis.
  redis.call('ZREMRANGEBYRANK', due, 0, #found - 1)
  local messages = call_sliced('HMGET', msg, found)
  local leases = {}
  local keyed = redis.call('HLEN', id_keys) > 0
  local revokes = {}
  if any_revoked then revokes = call_sliced('ZMSCORE', revoked, found) end
  for i = 1, #found do
    if not messages[i] then
      orphans[#orphans + 1] = found[i]
      if keyed then forget_key(pending_keys, id_keys, found[i]) end
    elseif revokes[i] then
      dropped[#dropped + 1] = found[i]
      redis.call('HDEL', msg, found[i])
      if keyed then forget_key(pending_keys, id_keys, found[i]) end
    else
      ids[#ids + 1] = found[i]
      scores[#scores + 1] = items[2 * i]
      payloads[#payloads + 1] = messages[i]
      leases[#leases + 1] = deadline
      leases[#leases + 1] = found[i]
    end
  end
  call_sliced('ZADD', inflight, leases)
end

local nxt = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
local next_claim = now + tonumber(ARGV[5])
if nxt[2] and tonumber(nxt[2]) < next_claim then next_claim = tonumber(nxt[2]) end
redis.call('DEL', wake)  -- a full batch: the leader claims again at once, and wakes up unasked
if #items < 2 * tonumber(ARGV[3]) then
  redis.call('SET', wake, next_claim, 'PX', tonumber(ARGV[6]))
end

-- Every write is done: from here on only reads, and an error leaves the entry as stored.
local env = new_envelopes(cjson.decode(ARGV[7]), ARGV[8], KEYS[11])
for i = 1, #ids do
  lists[i] = 0
  local value = payloads[i]
  local ok, envelope, targets = pcall(env.build, id_text(ids[i]), value)
  if ok and envelope then
    if type(targets) == 'table' then targets = #targets == 1 and targets[1] or nil end
    if type(targets) == 'number' then
      local stamp = ''
      if string.byte(value, 1) == 1 and #value >= 11 then stamp = string.sub(value, 1, 11) end
      payloads[i] = stamp .. envelope
      lists[i] = targets
    end
  end
end
return {1, now, nxt[2] or -1, ids, scores, payloads, deadline, orphans, dropped,
        tonumber(redis.call('GET', revoked_gen) or '0'), lists}

--[[
  The same-Redis fast path: move due entries of one shard straight into Kombu's queue lists.

  KEYS[1] due, KEYS[2] msg, KEYS[3] inflight, KEYS[4] lock, KEYS[5] epoch,
  KEYS[6] pending_keys, KEYS[7] id_keys, KEYS[8] wake, KEYS[9] revoked, KEYS[10] revoked_gen,
  KEYS[11] shared, KEYS[12] shared_old, KEYS[13] shared_grave (the shard's shared prefixes:
  store/shared.py, store/shared_gc.py), KEYS[14] big (the marks of values over 64 KB: includes/big.lua),
  then the broker's keys the dispatcher allows (KEYS[15..]: queue lists and binding sets, named by
  position in the route table of ARGV[7]).
  ARGV[1] leader token, ARGV[2] leader epoch, ARGV[3] most entries to take, ARGV[4] lease (ms),
  ARGV[5] longest the leader waits before coming again (ms), ARGV[6] ttl of the wake key (ms),
  ARGV[7] the route table, JSON: accept (content types), steps (Kombu's priority_steps),
    queues (name -> KEYS index of its list per step), exchanges (name -> {type, key, permanent,
    sep}), mode (the producer's default delivery mode)
  ARGV[8] this call's delivery tag prefix (a random UUID's first 24 characters; a serial follows),
  ARGV[9] most stored bytes to take (includes/budget.lua: a bigger entry goes alone; absent: no limit)
  ARGV[10] replicas the master must have in sync, else nothing is taken (includes/replicas.lua;
    absent: no check)

  Runs only when the broker is this Redis server and database (never on a cluster): one script
  takes the entries out of the store and LPUSHes the envelope Kombu's Redis transport would write
  (its priority sub-queue, its direct or topic bindings), so no entry is ever in both, or in
  neither (I1, I2). Fenced like the claim (I3): refuses unless the lock still holds this token and
  the epoch is unchanged; due by the Redis clock (I5).

  An entry is pushed only when the script can build exactly what the generic path would publish:
  a JSON body a worker decodes as [args, kwargs, embed], headers that pass the worker's checks, a
  content type in `accept`, a plain delivery, and a route through an exchange of the table to
  queues of the table. The `eta` header moves to `zset_eta` as the generic publisher does.
  Anything else (an `expires` to turn into a TTL, compression, a fanout or unknown exchange, a
  pattern only Python's regex can read, a number JSON round trips could change) is claimed as
  the claim script does (moved to `inflight` with a lease) and returned for the generic path.
  Revoked ids are dropped and orphans reported as the claim does.

  Returns {0} when fenced, else
    {1, now ms, next due ms or -1, {generic ids}, {their due scores}, {their stored values},
     lease deadline ms, {orphan ids}, {revoked ids}, revoke count, {due scores of pushed entries},
     first due ms, last due ms (of everything taken) or -1}
]]
--- @include "replicas"
--- @include "now"
--- @include "forget_key"
--- @include "call_sliced"
--- @include "live_revokes"
--- @include "plan_wake"
--- @include "budget"
--- @include "big"
--- @include "ids"
--- @include "envelope"

local due, msg, inflight, lock, epoch = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local pending_keys, id_keys, wake, revoked, revoked_gen = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local big = KEYS[14]

require_replicas(tonumber(ARGV[10]))
if redis.call('GET', lock) ~= ARGV[1] or redis.call('GET', epoch) ~= ARGV[2] then
  return {0}
end

local routes = cjson.decode(ARGV[7])
local now = now_ms()
local deadline = now + tonumber(ARGV[4])
local items = redis.call('ZRANGEBYSCORE', due, '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[3]))
local picked = nil  -- the positions the byte budget takes (nil: every entry found)
local ids, scores, payloads, orphans, dropped, pushed_scores = {}, {}, {}, {}, {}, {}
local any_revoked = any_live_revokes(revoked, now)

if #items > 0 then
  -- Everything is read and built first, and only then written: a builder error (pcall) or a
  -- queue key of another type sends the entry to the generic path instead of aborting a script
  -- that has already taken entries out of `due` (Redis does not roll a script back).
  local found = {}
  for i = 1, #items, 2 do found[#found + 1] = items[i] end
  local messages
  messages, picked = read_within_budget(msg, big, items, found, tonumber(ARGV[9]), now)
  if picked then  -- only what the budget takes is read on; the rest stays in `due`, untouched
    found, items, messages = picked_only(items, found, messages, picked)
  end
  local keyed = redis.call('HLEN', id_keys) > 0
  local revokes = {}
  if any_revoked then revokes = call_sliced('ZMSCORE', revoked, found) end
  local env = new_envelopes(routes, ARGV[8], {KEYS[11], KEYS[12], KEYS[13]})
  local wanted = {}
  for i = 1, #found do
    if messages[i] and not revokes[i] then wanted[i] = messages[i] end
  end
  local built, targets_of = env.build_all(found, wanted, #found)
  local key_ok = {}
  local function usable(key)  -- a list, or no key yet: anything else is left to Kombu's own error
    local known = key_ok[key]
    if known == nil then
      local kind = redis.call('TYPE', KEYS[key])['ok']
      known = kind == 'list' or kind == 'none'
      key_ok[key] = known
    end
    return known
  end
  for i = 1, #found do
    if built[i] then
      local targets = targets_of[i]
      if type(targets) == 'number' then  -- the common case: one list
        if not usable(targets) then built[i] = nil end
      else
        for t = 1, #targets do
          if not usable(targets[t]) then built[i] = nil; break end
        end
      end
    end
  end

  -- The first #found by rank are exactly what the range returned (or the budget took from its
  -- start): no id to pass back to Redis. Removing first also frees memory before anything grows
  -- it (a full store still drains).
  remove_taken(due, found, picked)
  local leases, gone, forget, writes, order = {}, {}, {}, {}, {}
  local function write(key, envelope)
    local list = writes[key]
    if not list then list = {}; writes[key] = list; order[#order + 1] = key end
    list[#list + 1] = envelope
  end
  for i = 1, #found do
    local id = found[i]
    if not messages[i] then
      orphans[#orphans + 1] = id
      forget[#forget + 1] = id
    elseif revokes[i] then
      dropped[#dropped + 1] = id
      gone[#gone + 1] = id
      forget[#forget + 1] = id
    elseif built[i] then
      local targets = targets_of[i]
      if type(targets) == 'number' then
        write(targets, built[i])
      else
        for t = 1, #targets do write(targets[t], built[i]) end
      end
      gone[#gone + 1] = id
      forget[#forget + 1] = id
      pushed_scores[#pushed_scores + 1] = tonumber(items[2 * i])
    else
      ids[#ids + 1] = id
      scores[#scores + 1] = items[2 * i]
      payloads[#payloads + 1] = messages[i]
      leases[#leases + 1] = deadline
      leases[#leases + 1] = id
    end
  end
  for _, key in ipairs(order) do call_sliced('LPUSH', KEYS[key], writes[key]) end
  if #gone > 0 then
    call_sliced('HDEL', msg, gone)
    unmark_big(big, gone)
  end
  if #leases > 0 then call_sliced('ZADD', inflight, leases) end
  if keyed then
    for _, id in ipairs(forget) do forget_key(pending_keys, id_keys, id) end
  end
end

local nxt = plan_wake(due, wake, now, tonumber(ARGV[5]), tonumber(ARGV[6]),
                      picked ~= nil or #items >= 2 * tonumber(ARGV[3]))
local first, last = -1, -1
if #items > 0 then first, last = tonumber(items[2]), tonumber(items[#items]) end
return {1, now, nxt or -1, ids, scores, payloads, deadline, orphans, dropped,
        tonumber(redis.call('GET', revoked_gen) or '0'), pushed_scores, first, last}

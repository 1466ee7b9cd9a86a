-- The claim of claim-11.lua, shared with claim_built-14.lua: KEYS[1..11] and ARGV[1..6] as that
-- script's header names them, `budget` the most stored bytes one claim takes (budget.lua; nil:
-- no limit). Returns nil when fenced, else what both scripts return: the claim time, the next
-- due score (or nil), the claimed ids with their scores and stored values, the lease deadline,
-- the orphans and the revoked ids dropped. `replicas`: the replicas in sync the master must have
-- (replicas.lua; nil or 0: no check).
--- @include "replicas"
--- @include "now"
--- @include "forget_key"
--- @include "call_sliced"
--- @include "live_revokes"
--- @include "plan_wake"
--- @include "budget"
--- @include "big"
local function claim_due(budget, replicas)
  require_replicas(replicas)
  local due, msg, inflight, lock, epoch = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
  local pending_keys, id_keys, wake, revoked, big = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[11]

  if redis.call('GET', lock) ~= ARGV[1] or redis.call('GET', epoch) ~= ARGV[2] then
    return nil
  end

  local now = now_ms()
  local deadline = now + tonumber(ARGV[4])
  local items = redis.call('ZRANGEBYSCORE', due, '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[3]))
  local ids, scores, payloads, orphans, dropped = {}, {}, {}, {}, {}
  local any_revoked = any_live_revokes(revoked, now)

  local left = false  -- entries the range found that the budget leaves in `due`
  if #items > 0 then
    local found = {}
    for i = 1, #items, 2 do found[#found + 1] = items[i] end
    local messages, picked = read_within_budget(msg, big, items, found, budget, now)
    left = picked ~= nil
    found, items, messages = take_from_due(due, items, found, messages, picked)
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
        unmark_big(big, {found[i]})
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

  local nxt = plan_wake(due, wake, now, tonumber(ARGV[5]), tonumber(ARGV[6]),
                        left or #items >= 2 * tonumber(ARGV[3]))
  return {now = now, next = nxt, ids = ids, scores = scores, payloads = payloads,
          deadline = deadline, orphans = orphans, dropped = dropped}
end

--[[
  Claim due entries of one shard, as the claim script does, with Kombu's envelope of each entry
  the fast path's builder can rebuild exactly (for a Redis broker on another server or database).

  KEYS[1] due, KEYS[2] msg, KEYS[3] inflight, KEYS[4] lock, KEYS[5] epoch,
  KEYS[6] pending_keys, KEYS[7] id_keys, KEYS[8] wake, KEYS[9] revoked, KEYS[10] revoked_gen,
  KEYS[11] big (as claim-11.lua), KEYS[12] shared, KEYS[13] shared_old, KEYS[14] shared_grave (the
  shard's shared prefixes: store/shared.py, store/shared_gc.py).
  ARGV[1..6] as claim-11.lua, ARGV[7] the route table (fast_push-14.lua's, its list indexes
  naming the broker's lists of the caller's own table instead of KEYS, and no exchanges: bindings
  live on the broker), ARGV[8] this call's delivery tag prefix, ARGV[9] most stored bytes to claim
  (as claim-11.lua's ARGV[7]), ARGV[10] replicas in sync the master must have (as claim-11.lua's ARGV[8]).

  The claim is the claim script's: every entry moves from `due` to `inflight` with a lease, and is
  forgotten only by the ack after the caller published it (I1, I2). The builder only reads (the
  shard's own `shared` hashes, nothing else: a cluster shard's keys share one slot) and runs after
  every write, under pcall: whatever it does, the claim stands. An entry it cannot rebuild (an
  exchange, `expires`, compression, a queue the table does not name...) comes back as stored.

  Returns {0} when fenced, else
    {1, now ms, next due ms or -1, {ids}, due scores, {values}, lease deadline ms, {orphan ids},
     {revoked ids}, revoke count, list indexes, stamps}
  where the due scores and the list indexes (0: not built) are one string each, comma-separated
  in the order of the ids (two bulk strings to read instead of two a claimed entry), a value
  whose index is not 0 is the entry's envelope and one whose index is 0 the value as stored, and
  the stamps are one string of 11 bytes an id, in their order: each value's arrival stamp as
  stored (store/values.py), or \1 and ten zero bytes for a value stored without one. The stamps
  are not put back in front of the envelopes: Redis' Lua hashes every byte of each string it
  makes, and a second ~1 KB string an entry cost ~2 us of the server's time.
]]
--- @include "claim"
--- @include "ids"
--- @include "envelope"

local c = claim_due(tonumber(ARGV[9]), tonumber(ARGV[10]))
if not c then return {0} end
local ids, payloads, lists, stamps = c.ids, c.payloads, {}, {}
local UNSTAMPED = '\1' .. string.rep('\0', 10)

-- Every write is done: from here on only reads, and an error leaves the entry as stored.
local env = new_envelopes(cjson.decode(ARGV[7]), ARGV[8], {KEYS[12], KEYS[13], KEYS[14]})
local built, targets_of = env.build_all(ids, payloads, #ids)
for i = 1, #ids do
  lists[i] = 0
  local value = payloads[i]
  stamps[i] = (string.byte(value, 1) == 1 and #value >= 11) and string.sub(value, 1, 11) or UNSTAMPED
  local targets = targets_of[i]
  if built[i] then
    if type(targets) == 'table' then targets = #targets == 1 and targets[1] or nil end
    if type(targets) == 'number' then
      payloads[i] = built[i]
      lists[i] = targets
    end
  end
end
return {1, c.now, c.next or -1, ids, table.concat(c.scores, ','), payloads, c.deadline, c.orphans, c.dropped,
        tonumber(redis.call('GET', KEYS[10]) or '0'), table.concat(lists, ','), table.concat(stamps)}

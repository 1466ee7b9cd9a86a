--[[
  Claim due entries of one shard for publishing (leader only).

  KEYS[1] due, KEYS[2] msg, KEYS[3] inflight, KEYS[4] lock, KEYS[5] epoch,
  KEYS[6] pending_keys, KEYS[7] id_keys, KEYS[8] wake, KEYS[9] revoked, KEYS[10] revoked_gen,
  KEYS[11] big (the marks of values over 64 KB: includes/big.lua)
  ARGV[1] leader token, ARGV[2] leader epoch, ARGV[3] most entries to claim, ARGV[4] lease (ms),
  ARGV[5] longest the leader waits before claiming again (ms), ARGV[6] ttl of the wake key (ms),
  ARGV[7] most stored bytes to claim (includes/budget.lua: a bigger entry goes alone; absent: no limit)
  ARGV[8] replicas the master must have in sync, else nothing is claimed (includes/replicas.lua;
    absent: no check)

  Fencing (I3): refuses unless the lock still holds this token and the epoch is unchanged.
  Due means due by the Redis server's clock (I5). Each claimed id moves from `due` to `inflight`
  with a lease deadline, so a crash before the ack returns it to `due` (reap), never loses it.
  The whole batch costs a fixed number of calls (ZREM, HMGET, ZADD of all ids at once), plus an
  HSTRLEN and an HGET a marked big value. The
  in-flight score (the lease deadline) identifies this claim: ack and release only act on an id
  whose score still matches, so running either twice (a lost reply) cannot touch a later claim.
  Idempotency-key bookkeeping stays until the ack, so a reaped or released entry keeps its key.

  A due id with a live revoke record (I10: revoked while in flight and put back since, or sent
  again after its revoke) is not claimed: it is dropped with its message and returned as revoked.
  Expired records are trimmed here, so records outlive their ttl only while no leader claims. The
  shard's revoke count is returned too: a revoke after this claim changes it, which tells the
  hand-off to read the records of what it holds again before publishing.

  It also writes when the leader will claim this shard next (the earliest due entry, at most
  ARGV[5] ms away) to the wake key: a schedule due before that publishes a wake-up. Written here,
  with the claim, the key is never stale while the leader lives. Its old value is deleted first:
  on a full store Redis refuses a script's first memory-growing write, and a shard with nothing due
  would otherwise fail its claim (and so drain nothing) exactly when the store needs draining.

  Returns {0} when fenced, else
    {1, now ms, next due ms or -1, {ids}, {due scores}, {messages}, lease deadline ms, {orphan ids},
     {revoked ids}, revoke count}
  An id found in `due` without a message (another program wrote it, or a bug) cannot be published:
  it is dropped from `due` and returned as an orphan, so the dispatcher logs and counts it.
]]
--- @include "claim"

local c = claim_due(tonumber(ARGV[7]), tonumber(ARGV[8]))
if not c then return {0} end
return {1, c.now, c.next or -1, c.ids, c.scores, c.payloads, c.deadline, c.orphans, c.dropped,
        tonumber(redis.call('GET', KEYS[10]) or '0')}

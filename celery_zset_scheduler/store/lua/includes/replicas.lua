-- With zset_scheduler_wait_replicas = n > 0, nothing is handed off from a master with fewer than
-- n replicas in sync. After a Sentinel failover the old master goes on taking writes until the
-- sentinels reconfigure it (seconds later), and an entry handed off there would be handed off
-- again from the new master, which never saw it go. The promoted replica drops its link at once,
-- so the old master refuses from that instant. Called before the script writes anything (Redis
-- does not roll a script back); the error is an outage of the shard to the dispatcher, which
-- tries again (by then through the new master).
local function require_replicas(wanted)
  if not wanted or wanted <= 0 then return end
  local info = redis.call('INFO', 'replication')
  local online = 0
  for _ in string.gmatch(info, 'slave%d+:[^\r\n]*state=online') do online = online + 1 end
  if online < wanted then
    -- a string at level 0 (no position): Redis 6.2 cannot raise an error table from a function
    error('NOREPLICAS ' .. online .. ' of the ' .. wanted ..
      ' replicas asked for (zset_scheduler_wait_replicas) are in sync: nothing handed off', 0)
  end
end

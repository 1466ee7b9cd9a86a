--[[
  One step of the collection of a shard's unused shared prefixes (store/shared_gc.py).

  KEYS[1] shared      HASH id -> prefix: where writers put the prefixes they refer to
  KEYS[2] shared_old  HASH the prefixes `shared` held when the cycle began
  KEYS[3] shared_grave HASH what `shared_old` held when the last cycle ended (deleted at the next end)
  KEYS[4] shared_gc   HASH the cycle's state: begun, cursor, scanning ('msg' or 'mv'), layout,
                      server (the run_id the scan runs on), last (when the last cycle began)
  KEYS[5] msg         HASH id -> stored value (scanned)
  KEYS[6] moving_msg  HASH id -> stored value of an entry a reshard is moving (scanned)
  KEYS[7] moving      ZSET entries a reshard is moving (the scan waits while it holds any)
  KEYS[8] layout      STRING the shard count writes are routed with (a change restarts the scan)
  ARGV[1] least time between the beginnings of two cycles (ms), ARGV[2] values to scan (HSCAN COUNT)

  A cycle: begin (RENAME shared -> shared_old), scan every value of `msg` and `moving_msg` and
  move the prefix each refers to back into `shared` (from `shared_old` or `shared_grave`), then
  end (delete `shared_grave`, RENAME shared_old -> shared_grave). Readers look in the three
  hashes in that order, so nothing they need is ever missing while a prefix waits in the old ones.

  The first step on a shard only records the time: the first cycle begins ARGV[1] later. A prefix
  is deleted at the end of the cycle after the one that found no value referring to it.
  A value written during a cycle refers to a prefix its writer put in `shared` with HSETNX just
  before (same connection, same round trip), or was present when the scan began, so it is found
  by the scan of this cycle or of the next: a value is lost only if its writer's HSETNX ran more
  than ARGV[1] before the value itself (a producer stopped in the middle of sending one pipeline).
  While a reshard moves entries (values leave and enter the scanned hashes) the scan starts over,
  and so it does on another server process than the one it began on (HSCAN's guarantee holds
  within one).

  Returns {state, a, b}:
    {'wait', ms until a cycle may begin, 0}
    {'begun', prefixes moved to shared_old, 0}
    {'scanned', values scanned, prefixes moved back}
    {'busy', 0, 0}                a reshard is moving entries: the scan starts over after it
    {'ended', prefixes deleted, prefixes no value referred to (kept in shared_grave for one more cycle)}
    {'refused', 0, 0}             INFO is not allowed (the scan needs the server's run_id): nothing done
]]
--- @include "now"

local shared, old, grave, gc = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local msg, moving_msg, moving, layout_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local period, count = tonumber(ARGV[1]), tonumber(ARGV[2])
local now = now_ms()
local layout = redis.call('GET', layout_key) or ''
-- HSCAN's cursor means something only to the server process that made it (the hash seed is
-- random per process): a restart, a promoted replica or a slot moved to another node starts
-- the scan over.
local info = redis.pcall('INFO', 'server')
if type(info) ~= 'string' then  -- INFO refused (an ACL without @dangerous): nothing is touched
  return {'refused', 0, 0}
end
local server = string.match(info, 'run_id:(%x+)') or ''

local state = redis.call('HMGET', gc, 'begun', 'cursor', 'scanning', 'layout', 'last', 'server')
local begun, cursor, scanning, seen_layout, last = state[1], state[2], state[3], state[4], tonumber(state[5])
local seen_server = state[6]

if not begun then
  if not last then
    -- The first look only starts the clock: the first cycle begins a period later, so processes
    -- of a version that reads only `shared` can be upgraded meanwhile.
    redis.call('HSET', gc, 'last', now)
    return {'wait', period, 0}
  end
  if now - last < period then
    return {'wait', last + period - now, 0}
  end
  if redis.call('ZCARD', moving) > 0 then
    return {'busy', 0, 0}
  end
  -- shared_old is empty between cycles (the last end renamed it); a leftover is merged first so
  -- that nothing it holds is lost.
  if redis.call('EXISTS', old) == 1 then
    local rest = redis.call('HGETALL', old)
    for i = 1, #rest, 2 do redis.call('HSETNX', shared, rest[i], rest[i + 1]) end
    redis.call('DEL', old)
  end
  local moved = redis.call('HLEN', shared)
  if moved > 0 then redis.call('RENAME', shared, old) end
  redis.call('HSET', gc, 'begun', now, 'last', now, 'cursor', '0', 'scanning', 'msg', 'layout', layout,
             'server', server)
  return {'begun', moved, 0}
end

if server ~= seen_server then
  redis.call('HSET', gc, 'cursor', '0', 'scanning', 'msg', 'server', server)
  return {'scanned', 0, 0}
end
if layout ~= seen_layout or redis.call('ZCARD', moving) > 0 then
  redis.call('HSET', gc, 'cursor', '0', 'scanning', 'msg', 'layout', layout)
  return {'busy', 0, 0}
end

local reply = redis.call('HSCAN', scanning == 'mv' and moving_msg or msg, cursor, 'COUNT', count)
local values = reply[2]
local copied, checked = 0, {}
for i = 2, #values, 2 do
  local value = values[i]
  local at = (string.byte(value, 1) == 1 and #value >= 11) and 12 or 1
  if string.byte(value, at) == 2 and #value >= at + 8 then
    local sid = string.sub(value, at + 1, at + 8)
    if not checked[sid] then
      checked[sid] = true
      if redis.call('HEXISTS', shared, sid) == 0 then
        local prefix = redis.call('HGET', old, sid) or redis.call('HGET', grave, sid)
        if prefix then
          redis.call('HSET', shared, sid, prefix)
          redis.call('HDEL', old, sid)
          redis.call('HDEL', grave, sid)
          copied = copied + 1
        end
      end
    end
  end
end

if reply[1] ~= '0' then
  redis.call('HSET', gc, 'cursor', reply[1])
  return {'scanned', #values / 2, copied}
end
if scanning ~= 'mv' then
  redis.call('HSET', gc, 'cursor', '0', 'scanning', 'mv')
  return {'scanned', #values / 2, copied}
end

-- Every value was scanned: what the last cycle left in the grave is unused, and so is what this
-- one will leave there, unless the next scan finds a value that refers to it.
local deleted = redis.call('HLEN', grave)
redis.call('UNLINK', grave)
local kept = 0
if redis.call('EXISTS', old) == 1 then
  kept = redis.call('HLEN', old)
  redis.call('RENAME', old, grave)
end
redis.call('HDEL', gc, 'begun', 'cursor', 'scanning', 'layout', 'server')
return {'ended', deleted, kept}

--[[
  Forget entries that were published.

  KEYS[1] inflight, KEYS[2] msg, KEYS[3] due, KEYS[4] pending_keys, KEYS[5] id_keys, KEYS[6] big
  ARGV pairs: id, the lease deadline (ms) its claim returned

  Not fenced on purpose: a message that was published must not be published again, whoever leads
  now. Only an id still in flight under that very claim (same deadline) is acked, so running this
  twice, or after the entry was reaped and claimed again, changes nothing. The message is kept when
  the id is pending again (a retry scheduled in the meantime). A fixed number of calls per batch.
  Returns how many ids were acked.
]]
--- @include "forget_key"
--- @include "call_sliced"
--- @include "big"

local inflight, msg, due, pending_keys, id_keys, big = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local ids, deadlines = {}, {}
for i = 1, #ARGV, 2 do
  ids[#ids + 1] = ARGV[i]
  deadlines[#deadlines + 1] = tonumber(ARGV[i + 1])
end

local current = call_sliced('ZMSCORE', inflight, ids)
local mine = {}
for i = 1, #ids do
  if current[i] and tonumber(current[i]) == deadlines[i] then mine[#mine + 1] = ids[i] end
end
if #mine == 0 then return 0 end

call_sliced('ZREM', inflight, mine)
local pending = call_sliced('ZMSCORE', due, mine)
local done = {}
for i = 1, #mine do
  if not pending[i] then done[#done + 1] = mine[i] end
end
if #done > 0 then
  call_sliced('HDEL', msg, done)
  unmark_big(big, done)
  if redis.call('HLEN', id_keys) > 0 then
    for i = 1, #done do forget_key(pending_keys, id_keys, done[i]) end
  end
end
return #mine

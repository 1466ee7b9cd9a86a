--[[
  Forget entries that were published.

  KEYS[1] inflight, KEYS[2] msg, KEYS[3] due
  ARGV ids

  Not fenced on purpose: a message that was published must not be published again, whoever leads
  now. The message is kept when the id is pending again (a retry scheduled in the meantime).
  A fixed number of calls for the whole batch (ZREM, ZMSCORE, HDEL), sliced for long batches.
  Returns how many ids were still in flight.
]]
--- @include "call_sliced"

local inflight, msg, due = KEYS[1], KEYS[2], KEYS[3]
local acked = 0
for _, n in ipairs(call_sliced('ZREM', inflight, ARGV)) do acked = acked + n end
local pending = call_sliced('ZMSCORE', due, ARGV)
local forget = {}
for i = 1, #ARGV do
  if not pending[i] then forget[#forget + 1] = ARGV[i] end
end
if #forget > 0 then call_sliced('HDEL', msg, forget) end
return acked

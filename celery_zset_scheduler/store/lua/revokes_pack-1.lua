--[[
  Copy the revoke records of UUIDs stored as text (format 4 and before) to their packed member
  (model/ids.py), same expiry: the claim of an entry scheduled by this version finds the record.
  Run once, by the client that upgrades the store; the text records stay (they still match an
  entry an older version wrote) and expire as they would have.

  KEYS[1] revoked  ZSET id -> expiry (ms)
  Returns how many records were copied.
]]
--- @include "call_sliced"
--- @include "ids"

local records = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local copies = {}
for i = 1, #records, 2 do
  local id = records[i]
  local packed = #id == 36 and other_form(id)
  if packed then
    copies[#copies + 1] = records[i + 1]
    copies[#copies + 1] = packed
  end
end
if #copies > 0 then call_sliced('ZADD', KEYS[1], copies) end  -- slices of 1000: whole pairs
return #copies / 2

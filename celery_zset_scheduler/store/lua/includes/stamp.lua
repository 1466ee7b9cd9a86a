-- The arrival stamp stored in front of every message: a marker byte, then Redis TIME (seconds and
-- microseconds) and the entry's place in its call, big-endian, so that entries due at the same
-- instant are handed off in the order they reached the store, whatever their shard.
local function stamp(t, j)
  return '\1' .. struct.pack('>I4I4I2', tonumber(t[1]), tonumber(t[2]), j)
end

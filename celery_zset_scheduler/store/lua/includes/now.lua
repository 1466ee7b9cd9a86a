-- The Redis server's clock in integer milliseconds: one clock for every dispatcher (I5).
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

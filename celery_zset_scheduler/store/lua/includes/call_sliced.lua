-- unpack() is bounded by Lua's C stack (~8000 values) and a batch can hold up to 5000 ids:
-- long lists go to Redis in slices. Returns the replies of all slices, concatenated (for
-- commands that answer one value per argument).
local function call_sliced(command, key, list)
  if #list == 0 then return {} end  -- nothing to send
  if #list <= 1000 then  -- one slice (a batch of the default size): its reply as it is
    local reply = redis.call(command, key, unpack(list))
    if type(reply) == 'table' then return reply end
    return {reply}
  end
  local out = {}
  for from = 1, #list, 1000 do
    local reply = redis.call(command, key, unpack(list, from, math.min(from + 999, #list)))
    if type(reply) == 'table' then
      for i = 1, #reply do out[#out + 1] = reply[i] end
    else
      out[#out + 1] = reply
    end
  end
  return out
end

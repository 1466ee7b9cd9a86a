-- Whether string a sorts after string b byte by byte: the order Redis gives ZSET members that
-- share a score (memcmp). Lua's own `<` follows the server's locale collation, which may differ.
local function bytes_after(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x > y end
  end
  return #a > #b
end

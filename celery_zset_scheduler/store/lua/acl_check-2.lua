--[[
  What of the scripts' needs this user may not have, asked before a dispatcher claims anything:
  a script refused a command halfway keeps the writes it made before it (Redis does not roll a
  script back), so a claim refused after taking entries from `due` would lose them.
  Redis 7 and Valkey give scripts redis.acl_check_cmd; an older server cannot be asked.

  KEYS[1] shard_key   a key of a shard (with the shard's hash tag)
  KEYS[2] prefix_key  a key of the prefix without a hash tag
  ARGV[1..] the commands the scripts run
  Returns the refused commands and 'key:<key>' for a refused key; false when the server cannot
  check. (The wake channel is not asked: a dispatcher that may not use it polls, and arms no wake
  key that would make a script publish.)
]]
if not redis.acl_check_cmd then return false end
local refused = {}
for i = 1, #ARGV do
  if not redis.acl_check_cmd(ARGV[i]) then refused[#refused + 1] = ARGV[i] end
end
-- HGET (run by the scripts) names a key first
if redis.acl_check_cmd('HGET') then
  for _, key in ipairs(KEYS) do
    if not redis.acl_check_cmd('HGET', key) then refused[#refused + 1] = 'key:' .. key end
  end
end
return refused

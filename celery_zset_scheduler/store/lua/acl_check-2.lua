--[[
  What of the scripts' needs this user may not have, asked before a dispatcher claims anything
  and before a process's first write: a script refused a command halfway keeps the writes it made
  before it (Redis does not roll a script back), so a claim refused after taking entries from
  `due` would lose them. Redis 7 and Valkey give scripts redis.acl_check_cmd; an older server
  cannot be asked.

  Each command is asked with a key of the store where it takes one: Valkey 8.1 reads past the
  arguments of a key-taking command asked without its key (and may crash).

  KEYS[1] shard_key   a key of a shard (with the shard's hash tag)
  KEYS[2] prefix_key  a key of the prefix without a hash tag
  ARGV[1..] the commands the scripts run
  Returns the refused commands and 'key:<key>' for a refused key; false when the server cannot
  check. (The wake channel is not asked: a dispatcher that may not use it polls, and arms no wake
  key that would make a script publish.)
]]
if not redis.acl_check_cmd then return false end
-- the commands the scripts run without a key (PUBLISH names a channel)
local KEYLESS = {time = true, publish = true}
local function allowed(command, key)
  if KEYLESS[string.lower(command)] then return redis.acl_check_cmd(command) end
  return redis.acl_check_cmd(command, key, key, key)
end

-- Which keys the user may use, asked with HGET (the scripts run it).
local usable, refused_keys = nil, {}
for _, key in ipairs(KEYS) do
  if allowed('HGET', key) then usable = usable or key else refused_keys[#refused_keys + 1] = key end
end
local refused = {}
-- The commands, with a key the user may use; with none, HGET or the keys are refused: the
-- commands are asked with the prefix's key, and if every one is refused, the keys are.
local probe = usable or KEYS[2]
local any = false  -- a command taking a key was allowed with the probe
for i = 1, #ARGV do
  if allowed(ARGV[i], probe) then
    any = any or not KEYLESS[string.lower(ARGV[i])]
  else
    refused[#refused + 1] = ARGV[i]
  end
end
if usable == nil and not any then refused = {} end
if usable ~= nil or not any then
  for _, key in ipairs(refused_keys) do refused[#refused + 1] = 'key:' .. key end
end
return refused

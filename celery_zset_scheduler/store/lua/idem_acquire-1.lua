--[[
  Try to start running an idempotency key.

  KEYS[1] record  HASH, the idempotency key's: state (running | done | failed), owner, outcome
  ARGV[1] owner (worker host:pid:task id:delivery), ARGV[2] lease (ms)

  Returns {'acquired'}                  the caller runs the body (its lease expires if it dies)
          {'done', outcome}             finished before: do not run, here is the outcome
          {'failed', outcome}           failed before and kept failed: do not run
          {'running', owner, ttl ms}    another delivery runs it right now
]]
local key = KEYS[1]
local state = redis.call('HGET', key, 'state')
if state == 'done' or state == 'failed' then
  return {state, redis.call('HGET', key, 'outcome') or ''}
end
if state == 'running' then
  local owner = redis.call('HGET', key, 'owner')
  if owner ~= ARGV[1] then
    return {'running', owner or '', redis.call('PTTL', key)}
  end
end
redis.call('HSET', key, 'state', 'running', 'owner', ARGV[1])
redis.call('PEXPIRE', key, tonumber(ARGV[2]))
return {'acquired'}

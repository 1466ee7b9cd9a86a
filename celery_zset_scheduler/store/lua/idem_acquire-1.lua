--[[
  Try to start running an idempotency key, with a fencing token for this acquisition.

  KEYS[1] record  HASH, the idempotency key's: state (running | done | failed), owner, outcome,
                  token (of the latest acquisition)
  ARGV[1] owner (worker host:pid:task id:delivery), ARGV[2] lease (ms)

  The token increases with every acquisition of the key: one more than the record's, and at
  least the Redis time in microseconds, so it keeps increasing after the record expired (unless
  the Redis clock is set back by more than the time since). A body passes it to what it writes
  to, which can then refuse a writer whose lease lapsed (its token is lower than the newest).

  Returns {'acquired', token}           the caller runs the body (its lease expires if it dies)
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
local t = redis.call('TIME')
local token = math.max((tonumber(redis.call('HGET', key, 'token')) or 0) + 1,
                       tonumber(t[1]) * 1000000 + tonumber(t[2]))
redis.call('HSET', key, 'state', 'running', 'owner', ARGV[1], 'token', string.format('%d', token))
redis.call('PEXPIRE', key, tonumber(ARGV[2]))
return {'acquired', string.format('%d', token)}

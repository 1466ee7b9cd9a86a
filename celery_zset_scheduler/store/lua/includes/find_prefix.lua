-- A shared prefix (store/shared.py) by its id, from `shared` or, while a collection runs, the
-- hashes it set aside (store/shared_gc.py): `keys` = {shared, shared_old, shared_grave}. False
-- when none holds it.
local function find_prefix(keys, sid)
  return redis.call('HGET', keys[1], sid) or redis.call('HGET', keys[2], sid)
    or redis.call('HGET', keys[3], sid) or false
end

--- @include "call_sliced"
-- The byte budget of one claim: which of the entries a range found are taken this time.
-- Entries are taken in due order while their stored bytes stay within `budget`; the first that
-- would pass it ends the batch (it and the rest stay in `due`, first in line next time). An
-- entry bigger than the whole budget goes in a batch of its own: passed over while smaller
-- entries are due with it (they go out first, never behind it), taken alone once none is, or once
-- it is BIG_WAIT_MS late (a steady backlog of small ones does not hold it back for ever).
-- `items` is the range's reply (id, score, ...), `sizes` the stored bytes of each entry.
-- Returns nil when every entry fits (the common case), else the positions taken, in order.
local BIG_WAIT_MS = 1000
local function within_budget(items, sizes, n, budget, now)
  if not budget then return nil end
  local total = 0
  for i = 1, n do total = total + sizes[i] end
  if total <= budget then return nil end
  local any_small = false
  for i = 1, n do
    if sizes[i] <= budget then any_small = true; break end
  end
  local taken, used = {}, 0
  for i = 1, n do
    local size = sizes[i]
    if size > budget then
      if #taken == 0 and (not any_small or now - tonumber(items[2 * i]) >= BIG_WAIT_MS) then
        return {i}
      end
    elseif used + size > budget then
      break
    else
      taken[#taken + 1] = i
      used = used + size
    end
  end
  return taken
end

local function sizes_of(values, n)
  local sizes = {}
  for i = 1, n do
    local v = values[i]
    sizes[i] = v and #v or 0
  end
  return sizes
end

-- The stored values of the range's ids (false: an orphan) and the positions the budget takes
-- (nil: all of them). A value marked big (big.lua) is sized with HSTRLEN and read only when it is
-- taken; with no mark in the shard (the common case) it is one HMGET, as without a budget.
local function read_within_budget(msg, big, items, found, budget, now)
  local n = #found
  if not budget or redis.call('EXISTS', big) == 0 then
    local values = call_sliced('HMGET', msg, found)
    return values, budget and within_budget(items, sizes_of(values, n), n, budget, now)
  end
  local marks = call_sliced('HMGET', big, found)
  local values, sizes, unmarked, at = {}, {}, {}, {}
  for i = 1, n do
    if marks[i] then
      values[i], sizes[i] = false, redis.call('HSTRLEN', msg, found[i])
    else
      unmarked[#unmarked + 1], at[#at + 1] = found[i], i
    end
  end
  local read = call_sliced('HMGET', msg, unmarked)
  for k, i in ipairs(at) do
    values[i] = read[k]
    sizes[i] = read[k] and #read[k] or 0
  end
  local picked = within_budget(items, sizes, n, budget, now)
  for k = 1, picked and #picked or n do
    local i = picked and picked[k] or k
    if marks[i] and sizes[i] > 0 then values[i] = redis.call('HGET', msg, found[i]) end
  end
  return values, picked
end

-- Only the picked positions of the range's ids, items (id, score, ...) and values.
local function picked_only(items, found, values, picked)
  local ids, kept_items, kept_values = {}, {}, {}
  for k, i in ipairs(picked) do
    ids[k] = found[i]
    kept_items[2 * k - 1], kept_items[2 * k] = items[2 * i - 1], items[2 * i]
    kept_values[k] = values[i]
  end
  return ids, kept_items, kept_values
end

-- The taken ids out of `due`: by rank when they are the range's first ones (one command, no ids
-- sent back), else by id. `picked` as within_budget returns it (nil: all of them).
local function remove_taken(due, ids, picked)
  if picked and picked[#picked] ~= #picked then
    call_sliced('ZREM', due, ids)
  else
    redis.call('ZREMRANGEBYRANK', due, 0, #ids - 1)
  end
end

-- The taken entries out of `due`, and their ids, range items and values.
local function take_from_due(due, items, found, values, picked)
  if picked then found, items, values = picked_only(items, found, values, picked) end
  remove_taken(due, found, picked)
  return found, items, values
end

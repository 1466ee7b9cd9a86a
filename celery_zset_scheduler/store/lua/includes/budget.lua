--- @include "call_sliced"
-- The byte budget of one claim: which of the entries a range found are taken this time.
-- Entries are taken in due order while their stored bytes stay within `budget`; the first that
-- would pass it ends the batch (it and the rest stay in `due`, first in line next time). An
-- entry bigger than the whole budget goes in a batch of its own: passed over while smaller
-- entries are due with it (they go out first, never behind it), taken alone once none is, or once
-- it is BIG_WAIT_MS late (a steady backlog of small ones does not hold it back for ever).
-- `items` is the range's reply (id, score, ...), `values` the stored values (nil: an orphan).
-- Returns nil when every entry fits (the common case), else the positions taken, in order.
local BIG_WAIT_MS = 1000
local function within_budget(items, values, n, budget, now)
  if not budget then return nil end
  local sizes, total = {}, 0
  for i = 1, n do
    local v = values[i]
    local size = v and #v or 0
    sizes[i] = size
    total = total + size
  end
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

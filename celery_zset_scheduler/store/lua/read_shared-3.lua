--[[
  Read shared prefixes of one shard (store/shared.py) where a collection may have put them
  (store/shared_gc.py), in one atomic step: a collection step run between two separate reads
  could move a prefix out of a hash not read yet into one already read.

  KEYS[1] shared, KEYS[2] shared_old, KEYS[3] shared_grave
  ARGV[1..] prefix ids

  Returns one value per id: its prefix, or false when no hash holds it.
]]
--- @include "find_prefix"

local out = {}
for i = 1, #ARGV do out[i] = find_prefix(KEYS, ARGV[i]) end
return out

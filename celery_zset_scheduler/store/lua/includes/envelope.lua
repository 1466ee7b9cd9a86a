-- Kombu's Redis envelope of a stored entry, built inside Redis for the fast path.
--
-- The stored value is the codec's (model/codec.py): an optional arrival stamp (11 bytes after a
-- \1), then a JSON array (layout 2: task, argsrepr, kwargsrepr, origin, reply_to packed as ~ + 22
-- base64url characters when a UUID, delivery_mode, routing key, then an optional eta in epoch
-- microseconds and an optional extras object; layouts 5 and 4: 5 (4), task, origin, reply_to,
-- delivery_mode, routing key, argsrepr, kwargsrepr, then the same; layout 5's simple call: 0 in
-- the argsrepr slot and no kwargsrepr slot, its body only the arguments' text, from which argsrepr,
-- kwargsrepr and the body are rebuilt as the codec's decode does), a newline and the raw body. Since format 4
-- the part before argsrepr may be stored once per shard: the value is then \2, the prefix's 8-byte
-- id in the shard's `shared` hash (or, while a collection runs, its `shared_old` or `shared_grave`:
-- store/shared_gc.py), and the rest (store/shared.py). `build(member, value)` (the
-- entry's member, as ids.lua reads it) returns the envelope (JSON) and the KEYS indexes of the
-- lists it goes to, or nil when the generic path must publish it: it never guesses, so anything it
-- cannot rebuild exactly, or that a worker would refuse, goes there. `build_all` builds a batch.
--- @include "ids"
--- @include "find_prefix"
local NULL = cjson.null
local EMBED = ', {"callbacks": null, "errbacks": null, "chain": null, "chord": null}]'
local HEADER_SLOTS = {'task', 'argsrepr', 'kwargsrepr', 'origin'}
-- Celery's protocol-2 headers left out of the stored form when they hold these values.
local DEFAULTS = {
  {'lang', 'py'}, {'shadow', NULL}, {'eta', NULL}, {'expires', NULL}, {'group', NULL},
  {'group_index', NULL}, {'retries', 0}, {'timelimit', 'TIMELIMIT'}, {'parent_id', NULL},
  {'ignore_result', false}, {'replaced_task_nesting', 0}, {'stamped_headers', NULL}, {'stamps', 'STAMPS'},
}
-- Extras the builder understands; any other key sends the entry to the generic path.
local EXTRAS = {h = 1, p = 1, m = 1, a = 1, i = 1, r = 1, c = 1, ne = 1, ct = 1, ce = 1, x = 1, q = 1, nq = 1}
-- Largest stored value built here: Lua base64-encodes a body at ~75 ns a byte (a 20 MB argument
-- held the server 1.5 s, every shard with it), Python's C encoder many times faster; bigger
-- entries go to the generic path, which builds them in the dispatcher.
local BUILD_MAX = 65536
-- Stored properties published as they are (anything else, an `expiration` among them, is Python's).
local PROPERTIES = {priority = 1, correlation_id = 1, reply_to = 1, delivery_mode = 1}

-- Literal tables: built by the table constructor, cheaper than a loop at every script call.
local chars = {
  [0] = 'A', [1] = 'B', [2] = 'C', [3] = 'D', [4] = 'E', [5] = 'F', [6] = 'G', [7] = 'H',
  [8] = 'I', [9] = 'J', [10] = 'K', [11] = 'L', [12] = 'M', [13] = 'N', [14] = 'O', [15] = 'P',
  [16] = 'Q', [17] = 'R', [18] = 'S', [19] = 'T', [20] = 'U', [21] = 'V', [22] = 'W', [23] = 'X',
  [24] = 'Y', [25] = 'Z', [26] = 'a', [27] = 'b', [28] = 'c', [29] = 'd', [30] = 'e', [31] = 'f',
  [32] = 'g', [33] = 'h', [34] = 'i', [35] = 'j', [36] = 'k', [37] = 'l', [38] = 'm', [39] = 'n',
  [40] = 'o', [41] = 'p', [42] = 'q', [43] = 'r', [44] = 's', [45] = 't', [46] = 'u', [47] = 'v',
  [48] = 'w', [49] = 'x', [50] = 'y', [51] = 'z', [52] = '0', [53] = '1', [54] = '2', [55] = '3',
  [56] = '4', [57] = '5', [58] = '6', [59] = '7', [60] = '8', [61] = '9', [62] = '+', [63] = '/',
}
local url_values = {
  ['A'] = 0, ['B'] = 1, ['C'] = 2, ['D'] = 3, ['E'] = 4, ['F'] = 5, ['G'] = 6, ['H'] = 7,
  ['I'] = 8, ['J'] = 9, ['K'] = 10, ['L'] = 11, ['M'] = 12, ['N'] = 13, ['O'] = 14, ['P'] = 15,
  ['Q'] = 16, ['R'] = 17, ['S'] = 18, ['T'] = 19, ['U'] = 20, ['V'] = 21, ['W'] = 22, ['X'] = 23,
  ['Y'] = 24, ['Z'] = 25, ['a'] = 26, ['b'] = 27, ['c'] = 28, ['d'] = 29, ['e'] = 30, ['f'] = 31,
  ['g'] = 32, ['h'] = 33, ['i'] = 34, ['j'] = 35, ['k'] = 36, ['l'] = 37, ['m'] = 38, ['n'] = 39,
  ['o'] = 40, ['p'] = 41, ['q'] = 42, ['r'] = 43, ['s'] = 44, ['t'] = 45, ['u'] = 46, ['v'] = 47,
  ['w'] = 48, ['x'] = 49, ['y'] = 50, ['z'] = 51, ['0'] = 52, ['1'] = 53, ['2'] = 54, ['3'] = 55,
  ['4'] = 56, ['5'] = 57, ['6'] = 58, ['7'] = 59, ['8'] = 60, ['9'] = 61, ['-'] = 62, ['_'] = 63,
}

local function new_base64()
  -- Three bytes at a time through gsub with a memo table (Redis' Lua has no base64): the memo
  -- lives for one script call, and the same groups recur from body to body, so most of them
  -- cost a C table lookup instead of a Lua function call.
  local memo = setmetatable({}, {__index = function(t, k)
    local a, b, c = string.byte(k, 1, 3)
    local n = a * 65536 + b * 256 + c
    local v = chars[math.floor(n / 262144)] .. chars[math.floor(n / 4096) % 64] ..
              chars[math.floor(n / 64) % 64] .. chars[n % 64]
    rawset(t, k, v)
    return v
  end})
  local function base64(s)
    local full = #s - #s % 3
    local out = string.gsub(string.sub(s, 1, full), '...', memo)
    local rest = #s - full
    if rest == 1 then
      local a = string.byte(s, full + 1)
      out = out .. chars[math.floor(a / 4)] .. chars[(a % 4) * 16] .. '=='
    elseif rest == 2 then
      local a, b = string.byte(s, full + 1, full + 2)
      local n = a * 256 + b
      out = out .. chars[math.floor(n / 1024)] .. chars[math.floor(n / 16) % 64] .. chars[(n % 16) * 4] .. '='
    end
    return out
  end
  -- A body that ends with Celery's empty embed part: the groups before it, then the encoding of
  -- its last 0-2 bytes and the embed part, which is one of a handful per call.
  local tails = setmetatable({}, {__index = function(t, k)
    local v = base64(k .. EMBED)
    rawset(t, k, v)
    return v
  end})
  local function base64_embedded(stripped)
    local full = #stripped - #stripped % 3
    return string.gsub(string.sub(stripped, 1, full), '...', memo) .. tails[string.sub(stripped, full + 1)]
  end
  -- A simple call's body, '[[' .. args .. '], {}' and the embed part, as two strings for the
  -- caller's one concatenation: the groups of '[[' .. args, and the encoding of the rest.
  local simple_tails = setmetatable({}, {__index = function(t, k)
    local v = base64(k .. '], {}' .. EMBED)
    rawset(t, k, v)
    return v
  end})
  local function base64_simple(args)
    local head = '[[' .. args
    local full = #head - #head % 3
    if full == #head then return (string.gsub(head, '...', memo)), simple_tails[''] end
    return (string.gsub(string.sub(head, 1, full), '...', memo)), simple_tails[string.sub(head, full + 1)]
  end
  return base64, base64_embedded, base64_simple
end

local function unpack_uuid_once(v)
  -- '~' + 22 base64url characters -> the canonical UUID text (the codec's _unpack_uuid).
  if #v ~= 23 then return nil end
  local hex = {}
  for i = 2, 22, 2 do
    local a, b = url_values[string.sub(v, i, i)], url_values[string.sub(v, i + 1, i + 1)]
    if a == nil or b == nil then return nil end
    hex[#hex + 1] = string.format('%03x', a * 64 + b)
  end
  local h = string.sub(table.concat(hex), 1, 32)
  return string.sub(h, 1, 8) .. '-' .. string.sub(h, 9, 12) .. '-' .. string.sub(h, 13, 16) .. '-' ..
         string.sub(h, 17, 20) .. '-' .. string.sub(h, 21, 32)
end

-- One sender's messages share their reply_to: each packed value is unpacked once per call.
local uuid_memo = setmetatable({}, {__index = function(t, k)
  local v = unpack_uuid_once(k) or false
  rawset(t, k, v)
  return v
end})

local function unpack_uuid(v)
  return uuid_memo[v] or nil
end

local function iso_seconds(secs)
  local days = math.floor(secs / 86400)
  local rem = secs - days * 86400
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400 + (m <= 2 and 1 or 0)
  return string.format('%04d-%02d-%02dT%02d:%02d:%02d', y, m, d, math.floor(rem / 3600),
                       math.floor(rem / 60) % 60, rem % 60)
end

local seconds_memo = setmetatable({}, {__index = function(t, k)
  local v = iso_seconds(k)
  rawset(t, k, v)
  return v
end})

local function iso_us(us)
  -- Epoch microseconds as Python's datetime.isoformat() writes a UTC time (model.times.us_isoformat).
  local secs = math.floor(us / 1000000)
  local frac = us - secs * 1000000
  if frac > 0 then return string.format('%s.%06d+00:00', seconds_memo[secs], frac) end
  return seconds_memo[secs] .. '+00:00'
end

local function round_trips(meta)
  -- cjson reads and writes numbers with 14 significant digits, floats without their '.0', and
  -- an empty array as an object: an extras object holding any of these goes to the generic path.
  -- Strings are blanked first, so that their text never counts.
  local bare = string.gsub(string.gsub(meta, '\\.', ''), '"[^"]*"', '""')
  local extras = string.match(bare, '{.*')
  if not extras then return true end
  return not (string.find(extras, '[%.eE]%d') or string.find(extras, '%d[%.eE]') or
              string.find(extras, '[]', 1, true) or string.find(extras, '%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d'))
end

local function simple_args(args)
  -- A simple call's arguments' text (the codec's _SIMPLE_ARGS): JSON ints and strings of printable
  -- ASCII without double or single quotes, backslashes and commas, separated by ', ' (so that
  -- '[[' .. args .. '], {}' is always a JSON list of them and an empty object).
  if args == '' then return true end
  local at = 1
  while true do
    local after = string.match(args, '^%-?[1-9]%d*()', at) or string.match(args, '^%-?0()', at)
    if not after then
      local text
      text, after = string.match(args, '^"([^"]*)"()', at)
      if not text or string.find(text, "[^ -~]") or string.find(text, "[',\\]") then return false end
    end
    if after == #args + 1 then return true end
    if string.sub(args, after, after + 1) ~= ', ' then return false end
    at = after + 2
  end
end

local function simple_repr_parts(args)
  -- Celery's argsrepr of a simple call's arguments (the codec's _simple_reprs) as its text and
  -- its closing: '(' .. text .. closing. No token holds a comma, so one token is one without any.
  if args == '' then return '', ')' end
  local text = args
  if string.find(text, '"', 1, true) then text = string.gsub(text, '"', "'") end
  if not string.find(text, ',', 1, true) then return text, ',)' end
  return text, ')'
end

local function simple_reprs(args)
  local text, closing = simple_repr_parts(args)
  return '(' .. text .. closing
end

local function plain_body(body)
  -- What the worker's JSON decoder accepts as Celery's [args, kwargs, embed] (ASCII: Kombu's JSON
  -- escapes the rest, and a body with other bytes is left to Python's decoder).
  if string.find(body, '[\128-\255]') then return false end
  local ok, data = pcall(cjson.decode, body)
  if not ok or type(data) ~= 'table' or data[3] == nil or data[4] ~= nil then return false end
  local args, kwargs = data[1], data[2]
  if type(args) ~= 'table' or type(kwargs) ~= 'table' then return false end
  if next(args) ~= nil and args[1] == nil then return false end  -- a mapping where a list belongs
  if kwargs[1] ~= nil then return false end  -- a list where a mapping belongs
  return true
end

local function checked_headers(h, task_id)
  -- The worker's checks (celery/core/messages.py _malformed_header), and what the generic path changes.
  if type(h.task) ~= 'string' or h.task == '' then return false end
  if type(h.id) ~= 'string' then return false end
  local retries = h.retries
  if type(retries) ~= 'number' or retries < 0 or retries ~= math.floor(retries) then return false end
  if h.eta ~= NULL and type(h.eta) ~= 'string' then return false end
  if h.expires ~= NULL then return false end  -- the TTL left until it is computed in Python
  if h.compression ~= nil and h.compression ~= NULL then return false end
  local limits = h.timelimit
  if type(limits) ~= 'table' or #limits ~= 2 then return false end
  if h.eta ~= NULL and h.eta ~= '' then
    h.zset_eta = h.eta
    h.eta = NULL
  end
  return true
end

local function new_envelopes(routes, tag, shared_keys)
  local accept = {}
  for _, ct in ipairs(routes.accept) do accept[ct] = true end
  local steps, queues, exchanges = routes.steps, routes.queues, routes.exchanges
  local bindings = {}  -- exchange -> its binding rows, read once per call
  local serial = 0
  local base64, base64_embedded, base64_simple = new_base64()
  local json_ok = accept['application/json']
  local mode_text = tostring(routes.mode)

  local function rows(name, x)
    local found = bindings[name]
    if found then return found end
    found = {}
    local permanent = {}
    if x.permanent then
      for _, member in ipairs(redis.call('SMEMBERS', KEYS[x.permanent])) do permanent[member] = true end
    end
    for _, member in ipairs(redis.call('SMEMBERS', KEYS[x.key])) do
      local a = string.find(member, x.sep, 1, true)
      local b = a and string.find(member, x.sep, a + #x.sep, true)
      if b then
        -- A binding Kombu refreshes and expires (a queue with x-expires) can change under us.
        local changing = x.permanent and not permanent[member]
        found[#found + 1] = {string.sub(member, 1, a - 1), string.sub(member, a + #x.sep, b - 1),
                             string.sub(member, b + #x.sep), changing}
      end
    end
    bindings[name] = found
    return found
  end

  local function topic_match(rkey, pattern, routing_key)
    -- Kombu's pattern for a key of plain words, '*' and '#', checked against the binding's own
    -- (another form, from another Kombu, is Python's); then the same match as a Lua pattern.
    local py, lua = {}, {}
    for word in string.gmatch(rkey .. '.', '([^.]*)%.') do
      if word == '*' then py[#py + 1] = '[^\\.]+'; lua[#lua + 1] = '[^%.]+'
      elseif word == '#' then py[#py + 1] = '.*?'; lua[#lua + 1] = '.-'
      elseif string.find(word, '^[%w_]*$') then py[#py + 1] = word; lua[#lua + 1] = word
      else return nil end
    end
    if '^' .. table.concat(py, '\\.') .. '$' ~= pattern then return nil end
    return string.find(routing_key, '^' .. table.concat(lua, '%.') .. '$') ~= nil
  end

  local function targets(exchange, routing_key)
    if exchange == '' then
      if routing_key == '' then return nil end
      return {routing_key}
    end
    local x = exchanges[exchange]
    if not x then return nil end
    local out, seen = {}, {}
    for _, row in ipairs(rows(exchange, x)) do
      local hit
      if x.type == 'direct' then
        hit = row[1] == routing_key
      elseif x.type == 'topic' then
        if string.find(routing_key, '[\n\r]') then return nil end
        hit = topic_match(row[1], row[2], routing_key)
        if hit == nil then return nil end
      else
        return nil
      end
      if hit then
        if row[4] then return nil end
        if not seen[row[3]] then seen[row[3]] = true; out[#out + 1] = row[3] end
      end
    end
    if #out == 0 then return nil end  -- Kombu drops it or picks a dead-letter queue: Python's call
    return out
  end

  -- The list of priority 0; below the first step Kombu's bisect wraps around to the last one.
  local step0 = #steps
  for n = 1, #steps do if steps[n] <= 0 then step0 = n end end
  local quoted_uuids = setmetatable({}, {__index = function(t, k)
    local v = uuid_memo[k]
    v = v and ('"' .. v .. '"') or false
    rawset(t, k, v)
    return v
  end})

  -- The common entry (no extras: Celery's default headers and properties, the default exchange)
  -- is written as text: its JSON strings are copied as they are stored, so nothing is decoded
  -- and encoded again. Its envelope is the same text around a few values (the id, argsrepr and
  -- kwargsrepr, the body, the ETA, the delivery tag): the rest, its shape, is made once per
  -- call for each stored prefix (one per producer, task and queue).
  local function make_shape(simple, task, origin, reply_to, mode, rk)
    if not json_ok or task == '""' or rk == '""' then return false end
    local lists = queues[string.sub(rk, 2, -2)]
    if not lists then return false end
    if string.byte(reply_to, 2) == 126 then  -- '~': a packed UUID
      reply_to = quoted_uuids[string.sub(reply_to, 2, -2)]
      if not reply_to then return false end
    end
    if mode == '0' then mode = mode_text end
    local after_args = ',"origin":' .. origin .. ',"ignore_result":false,' ..
      '"replaced_task_nesting":0,"stamped_headers":null,"stamps":{}'
    return {
      simple = simple, list = lists[step0], after_args = after_args,
      after_simple = ',"kwargsrepr":"{}"' .. after_args,
      task = '","content-encoding":"utf-8","content-type":"application/json","headers":{"lang":"py","task":' ..
        task .. ',"id":',
      properties = ',"reply_to":' .. reply_to .. ',"delivery_mode":' .. mode ..
        ',"priority":0,"body_encoding":"base64","delivery_tag":"' .. tag,
      tail = '","delivery_info":{"exchange":"","routing_key":' .. rk .. '}}}',
    }
  end
  local ROOT = ',"shadow":null,"eta":null,"expires":null,"group":null,"group_index":null,' ..
    '"retries":0,"timelimit":[null,null],"root_id":'
  local ARGSREPR = ',"parent_id":null,"argsrepr":'
  local PROPERTIES_OPEN = '},"properties":{"correlation_id":'

  -- The shared part of layouts 5 and 4 (model/codec.py shared_length), strings without escapes.
  local PREFIX = '^%[[45],"[^"]*","[^"]*","[^"]*",%d+,"[^"]*",()'
  local shapes = {}  -- prefix text -> its shape, or false when not of the common form
  local function shape_of(prefix)
    local shape = shapes[prefix]
    if shape ~= nil then return shape end
    shape = false
    local layout, task, origin, reply_to, mode, rk = string.match(prefix,
      '^%[([45]),("[^"]*"),("[^"]*"),("[^"]*"),(%d+),("[^"]*"),$')
    if layout and not string.find(prefix, '\\', 1, true) then
      shape = make_shape(layout == '5', task, origin, reply_to, mode, rk)
    end
    shapes[prefix] = shape
    return shape
  end

  local etas = setmetatable({}, {__index = function(t, k)  -- the moved ETA's header, per stored ETA
    local v = k == '' and '' or (',"zset_eta":"' .. iso_us(tonumber(k)) .. '"')
    rawset(t, k, v)
    return v
  end})

  local function next_tag()  -- this call's next serial, the delivery tag after its prefix
    serial = serial + 1
    if serial < 65536 then return '00000000' .. HEX[math.floor(serial / 256)] .. HEX[serial % 256] end
    return string.format('%012x', serial)
  end

  local function plain_text(member, shape, args, kwargs, eta, raw, from, body_at)
    -- argsrepr and kwargsrepr as stored (raw's meta from `from`), and a body (from `body_at`) the
    -- worker decodes as [args, kwargs, embed].
    local escape = string.find(raw, '\\', from, true)
    if escape and escape < body_at then return nil end  -- an escaped quote would have misled the match
    if string.find(raw, '[\128-\255]', body_at) then return nil end
    local stored = string.sub(raw, body_at)
    local ok, data = pcall(cjson.decode, stored .. ']')
    if not ok or type(data) ~= 'table' or data[3] ~= nil then return nil end
    local a, k = data[1], data[2]
    if type(a) ~= 'table' or type(k) ~= 'table' or (next(a) ~= nil and a[1] == nil) or k[1] ~= nil then
      return nil
    end
    local id = id_quoted(member)
    return '{"body":"' .. base64_embedded(stored) .. shape.task .. id .. ROOT .. id .. ARGSREPR .. args ..
      ',"kwargsrepr":' .. kwargs .. shape.after_args .. etas[eta] .. PROPERTIES_OPEN .. id ..
      shape.properties .. next_tag() .. shape.tail, shape.list
  end

  local function shaped(member, shape, raw, at)
    -- The rest of an entry of this shape, from `at`: a simple call's 0 (its body only the
    -- arguments' text), or argsrepr and kwargsrepr; then an optional ETA and the body.
    local eta, body_at = string.match(raw, '^0,(%d+)%]\n()', at)
    if not eta then
      body_at = string.match(raw, '^0%]\n()', at)
      eta = ''
    end
    if eta ~= '' and #eta > 1 and string.byte(eta, 1) == 48 then return nil end  -- not JSON: Python's
    if body_at then
      if not shape.simple then return nil end
      local args = string.sub(raw, body_at)
      -- Its tokens (printable ASCII) make the body a JSON list of them and an empty object.
      if not simple_args(args) then return nil end
      local text, closing = simple_repr_parts(args)
      local groups, rest = base64_simple(args)
      local id = id_quoted(member)
      return '{"body":"' .. groups .. rest .. shape.task .. id .. ROOT .. id .. ARGSREPR .. '"(' .. text ..
        closing .. '"' .. shape.after_simple .. etas[eta] .. PROPERTIES_OPEN .. id .. shape.properties ..
        next_tag() .. shape.tail, shape.list
    end
    local args, kwargs
    args, kwargs, eta, body_at = string.match(raw, '^("[^"]*"),("[^"]*"),(%d+)%]\n()', at)
    if not args then
      args, kwargs, body_at = string.match(raw, '^("[^"]*"),("[^"]*")%]\n()', at)
      if not args then return nil end
      eta = ''
    elseif #eta > 1 and string.byte(eta, 1) == 48 then
      return nil
    end
    return plain_text(member, shape, args, kwargs, eta, raw, at, body_at)
  end

  local function legacy(member, raw, start)
    -- Layout 2 (task, argsrepr, kwargsrepr, origin, reply_to, delivery mode, routing key, ETA).
    local task, args, kwargs, origin, reply_to, mode, rk, eta, body_at = string.match(raw,
      '^%[("[^"]*"),("[^"]*"),("[^"]*"),("[^"]*"),("[^"]*"),(%d+),("[^"]*"),?(%d*)%]\n()', start)
    if not task then return nil end
    local shape = make_shape(false, task, origin, reply_to, mode, rk)
    if not shape then return nil end
    return plain_text(member, shape, args, kwargs, eta, raw, start, body_at)
  end

  local prefixes = {}  -- shared prefix id -> its bytes (false: the shard does not have it), per call

  local function build(member, value)
    if #value > BUILD_MAX then return nil end
    local start = (string.byte(value, 1) == 1 and #value >= 11) and 12 or 1
    if string.byte(value, start) == 2 then
      local sid = string.sub(value, start + 1, start + 8)
      local prefix = prefixes[sid]
      if prefix == nil then
        prefix = find_prefix(shared_keys, sid)
        prefixes[sid] = prefix
      end
      if not prefix then return nil end  -- the generic path dead-letters it
      local shape = shape_of(prefix)
      if shape then
        local text, list = shaped(member, shape, value, start + 9)
        if text then return text, list end
      end
      value = prefix .. string.sub(value, start + 9)
      start = 1
    else
      local after = string.match(value, PREFIX, start)
      local text, list
      if after then
        local shape = shape_of(string.sub(value, start, after - 1))
        if shape then text, list = shaped(member, shape, value, after) end
      else
        text, list = legacy(member, value, start)
      end
      if text then return text, list end
    end
    local task_id = id_text(member)
    local raw = value
    if start == 12 then raw = string.sub(raw, 12) end
    local nl = string.find(raw, '\n', 1, true)
    if not nl then return nil end
    local meta_text = string.sub(raw, 1, nl - 1)
    if string.find(meta_text, '\\u[dD][89abAB]') then return nil end  -- surrogates: Python's
    local ok, meta = pcall(cjson.decode, meta_text)
    if not ok or type(meta) ~= 'table' then return nil end
    local body = string.sub(raw, nl + 1)
    local simple = false
    if meta[1] == 5 and type(meta[7]) == 'number' then  -- a simple call: rebuild its slots
      if meta[7] ~= 0 or #meta < 7 or #meta > 9 or not simple_args(body) then return nil end
      meta = {meta[2], simple_reprs(body), '{}', meta[3], meta[4], meta[5], meta[6], meta[8], meta[9]}
      body, simple = '[[' .. body .. '], {}', true
    elseif meta[1] == 4 or meta[1] == 5 then  -- layouts 4 and 5: put their slots in layout 2's order
      if #meta < 8 or #meta > 10 then return nil end
      meta = {meta[2], meta[7], meta[8], meta[3], meta[4], meta[5], meta[6], meta[9], meta[10]}
    end
    if #meta < 7 or #meta > 9 then return nil end
    local eta_us, extras = nil, {}
    local rest = 8
    if type(meta[rest]) == 'number' then eta_us = meta[rest]; rest = rest + 1 end
    if meta[rest] ~= nil then
      extras = meta[rest]
      if type(extras) ~= 'table' or meta[rest + 1] ~= nil then return nil end
      for k in pairs(extras) do if not EXTRAS[k] then return nil end end
      if not round_trips(meta_text) then return nil end
    end
    local absent = {}
    for _, k in ipairs(extras.a or {}) do absent[k] = true end
    local h = extras.h or {}
    if type(h) ~= 'table' then return nil end
    for n, k in ipairs(HEADER_SLOTS) do
      if not absent[k] then h[k] = meta[n] end
    end
    local missing = {}
    for _, k in ipairs(extras.m or {}) do missing[k] = true end
    for _, d in ipairs(DEFAULTS) do
      local k, v = d[1], d[2]
      if h[k] == nil and not missing[k] then
        if v == 'TIMELIMIT' then v = {NULL, NULL} elseif v == 'STAMPS' then v = {} end
        h[k] = v
      end
    end
    if eta_us then h.eta = iso_us(eta_us) end
    if not extras.i then h.id = task_id end
    if not extras.r then h.root_id = task_id end
    if not checked_headers(h, task_id) then return nil end

    local content_type = extras.ct or 'application/json'
    local content_encoding = extras.ce or 'utf-8'
    if content_type ~= 'application/json' or not accept[content_type] or content_encoding ~= 'utf-8' then
      return nil
    end
    if not extras.ne then body = body .. EMBED elseif simple then return nil end
    if not plain_body(body) then return nil end

    local p = extras.p or {}
    if type(p) ~= 'table' then return nil end
    for k in pairs(p) do if not PROPERTIES[k] then return nil end end
    if not absent.reply_to then
      local reply_to = meta[5]
      if type(reply_to) == 'string' and string.sub(reply_to, 1, 1) == '~' then
        reply_to = unpack_uuid(reply_to)
        if not reply_to then return nil end
      end
      p.reply_to = reply_to
    end
    if not absent.delivery_mode then p.delivery_mode = meta[6] end
    if not extras.c then p.correlation_id = task_id end
    -- As Producer.publish: a delivery mode falls back to the producer's exchange's (2, persistent).
    local mode = p.delivery_mode
    if mode == nil or mode == NULL or mode == 0 or mode == false then
      mode = routes.mode
    elseif type(mode) ~= 'number' then
      return nil
    end
    p.delivery_mode = mode
    local priority = p.priority
    if priority == nil or priority == NULL or priority == 0 or priority == false then
      priority = 0
    elseif type(priority) ~= 'number' then
      return nil
    end
    p.priority = priority
    local exchange = extras.x or ''
    local routing_key = meta[7]
    if type(routing_key) ~= 'string' or type(exchange) ~= 'string' then return nil end
    local names = targets(exchange, routing_key)
    if not names then return nil end
    -- Kombu's _get_message_priority and _q_for_pri: clamp to 0..9, then the step at or below it.
    local level = math.max(math.min(priority, 9), 0)
    local step = #steps  -- below the first step: the last (Kombu's steps[bisect(steps, n) - 1])
    for n = 1, #steps do if steps[n] <= level then step = n end end
    local keys = {}
    for n, name in ipairs(names) do
      local lists = queues[name]
      if not lists then return nil end
      keys[n] = lists[step]
    end
    p.body_encoding = 'base64'
    p.delivery_tag = tag .. next_tag()
    p.delivery_info = {exchange = exchange, routing_key = routing_key}
    local envelope = {body = base64(body), ['content-encoding'] = content_encoding,
                      ['content-type'] = content_type, headers = h, properties = p}
    local encoded, text = pcall(cjson.encode, envelope)
    if not encoded then return nil end
    return text, keys
  end

  local function build_all(members, values, n)
    -- build() of every entry i <= n with values[i] set: {envelope or nil}, {targets or nil}. One
    -- pcall around them all; after an error, one per entry, each failing one left as stored.
    local built, targets = {}, {}
    local ok = pcall(function()
      for i = 1, n do
        if values[i] then built[i], targets[i] = build(members[i], values[i]) end
      end
    end)
    if ok then return built, targets end
    built, targets = {}, {}
    for i = 1, n do
      if values[i] then
        local fine, envelope, where = pcall(build, members[i], values[i])
        if fine then
          built[i], targets[i] = envelope, where
        else
          local why = type(envelope) == 'table' and envelope.err or tostring(envelope)  -- redis.call's errors are tables
          redis.log(redis.LOG_WARNING, 'zset envelope builder: entry left to the generic path: ' .. tostring(why))
        end
      end
    end
    return built, targets
  end

  return {build = build, build_all = build_all}
end

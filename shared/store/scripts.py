"""The store's Lua scripts, as named constants. Each binds KEYS/ARGV to named locals first.

ADD_COMMITS is the Lua twin of `lagwatch.shared.window.add_commit`; the two must agree (tests/test_store.py
replays random sequences through both). Ring layout: `packing.py`.
"""

_RING_CODEC = """
local ENTRY = '<i8i8i8i8i8i8'   -- offset, timestamp, observed_at, lag (-1 = null), order, first_order

local function decode_ring(packed)
  local entries = {}
  if not packed then return entries end
  local pos = 1
  while pos <= #packed do
    local offset, ts, observed, lag, order, first, nextpos = struct.unpack(ENTRY, packed, pos)
    entries[#entries + 1] = {offset, ts, observed, lag, order, first}
    pos = nextpos
  end
  return entries
end

local function encode_ring(entries)
  local parts = {}
  for i, e in ipairs(entries) do
    parts[i] = struct.pack(ENTRY, e[1], e[2], e[3], e[4], e[5], e[6])
  end
  return table.concat(parts)
end
"""

# KEYS: windows hash, meta hash, owners hash (all of one group)
# ARGV: intervals, min_distance_ms, expire_ms, now_ms, then 6 per commit:
#       field, offset, timestamp, order, observed_at, latest broker offset ('' when unknown)
# Returns one outcome letter per commit (window.AddOutcome values).
ADD_COMMITS = (
    _RING_CODEC
    + """
local windows_key, meta_key, owners_key = KEYS[1], KEYS[2], KEYS[3]
local intervals = tonumber(ARGV[1])
local min_distance = tonumber(ARGV[2])
local expire_ms = tonumber(ARGV[3])
local now = tonumber(ARGV[4])
local FIRST_COMMIT_ARG, ARGS_PER_COMMIT = 5, 6

local function add(entries, offset, ts, order, observed, broker)
  if ts < now - expire_ms then return 'x' end
  if broker == nil then return 'b' end
  local n = #entries
  local at = n + 1                      -- first entry whose order is >= the commit's
  for i = 1, n do
    if entries[i][5] >= order then at = i; break end
  end
  if at <= n and entries[at][6] <= order then return 'd' end
  local newest = (at == n + 1)
  if at == 1 and not newest and n >= intervals then return 'o' end
  local lag = -1
  if newest then lag = math.max(0, broker - offset) end
  if at > 1 and math.abs(ts - entries[at - 1][2]) < min_distance then
    local prev = entries[at - 1]        -- merge: keep its timestamp and first order
    prev[1], prev[3], prev[4], prev[5] = offset, observed, lag, order
    return 'm'
  end
  table.insert(entries, at, {offset, ts, observed, lag, order, order})
  while #entries > intervals do table.remove(entries, 1) end
  if newest then return 'a' end
  return 'i'
end

local rings, dirty, outcomes = {}, {}, {}
local newest_ts = tonumber(redis.call('HGET', meta_key, 'last') or '-1')
for i = FIRST_COMMIT_ARG, #ARGV, ARGS_PER_COMMIT do
  local field = ARGV[i]
  local ring = rings[field]
  if ring == nil then
    ring = decode_ring(redis.call('HGET', windows_key, field))
    rings[field] = ring
  end
  local ts = tonumber(ARGV[i + 2])
  local outcome = add(ring, tonumber(ARGV[i + 1]), ts, tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4]),
                      tonumber(ARGV[i + 5]))
  if outcome == 'a' or outcome == 'i' or outcome == 'm' then
    dirty[field] = true
    if ts > newest_ts then newest_ts = ts end
  end
  outcomes[#outcomes + 1] = outcome
end

local any = false
for field in pairs(dirty) do
  redis.call('HSET', windows_key, field, encode_ring(rings[field]))
  any = true
end
if any then
  redis.call('HSET', meta_key, 'last', newest_ts)
  local expires_at = newest_ts + expire_ms
  redis.call('PEXPIREAT', windows_key, expires_at)
  redis.call('PEXPIREAT', meta_key, expires_at)
  redis.call('PEXPIREAT', owners_key, expires_at)
end
return table.concat(outcomes)
"""
)

# KEYS: broker ring hash of one topic
# ARGV: intervals, sampled_at, then (partition, log-end offset) pairs
APPEND_BROKER_OFFSETS = """
local ring_key = KEYS[1]
local intervals = tonumber(ARGV[1])
local sampled_at = tonumber(ARGV[2])
local PAIR, PAIR_SIZE = '<i8i8', 16
for i = 3, #ARGV, 2 do
  local partition, offset = ARGV[i], tonumber(ARGV[i + 1])
  local ring = (redis.call('HGET', ring_key, partition) or '') .. struct.pack(PAIR, offset, sampled_at)
  local excess = #ring - intervals * PAIR_SIZE
  if excess > 0 then ring = string.sub(ring, excess + 1) end
  redis.call('HSET', ring_key, partition, ring)
end
return (#ARGV - 2) / 2
"""

# KEYS: windows hash, owners hash (of one group)
# ARGV: topic
# Removes the topic's partitions from the group; returns how many were removed.
DELETE_TOPIC_FROM_GROUP = """
local windows_key, owners_key = KEYS[1], KEYS[2]
local prefix = ARGV[1] .. ':'
local removed = 0
for _, field in ipairs(redis.call('HKEYS', windows_key)) do
  if string.sub(field, 1, #prefix) == prefix and string.find(field, '^%d+$', #prefix + 1) then
    redis.call('HDEL', windows_key, field)
    redis.call('HDEL', owners_key, field)
    removed = removed + 1
  end
end
return removed
"""

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

# KEYS: for each group in the call, its windows hash, meta hash, owners hash and rebalances zset
#       (on Redis Cluster a call holds the groups of one hash slot; on a single server, many groups)
# ARGV: intervals, min_distance_ms, expire_ms, now_ms, then one commits argument per group:
#       concatenated records '<i8i8i8i8i8Hc0': offset, timestamp, order, observed_at, latest broker
#       offset (-1 = unknown), then the field "<topic>:<partition>" with a uint16 length
#       (one binary argument per group instead of six per commit: argument encoding dominated the client's time)
# Returns, per group, a string with one outcome letter per commit (window.AddOutcome values).
ADD_COMMITS = (
    _RING_CODEC
    + """
local intervals = tonumber(ARGV[1])
local min_distance = tonumber(ARGV[2])
local expire_ms = tonumber(ARGV[3])
local now = tonumber(ARGV[4])
local FIRST_GROUP_ARG, KEYS_PER_GROUP = 5, 4
local COMMIT = '<i8i8i8i8i8Hc0'
local ENTRY_SIZE = 48
local MAX_UNPACK = 4000                 -- Lua's unpack() stack limit, in elements

-- An older commit: decode the ring and insert it in order (rare: replays and reprocessing).
local function insert_older(packed, offset, ts, order, observed)
  local entries = decode_ring(packed)
  local n = #entries
  local at = n + 1                      -- first entry whose order is >= the commit's
  for i = 1, n do
    if entries[i][5] >= order then at = i; break end
  end
  if entries[at][6] <= order then return 'd' end
  if at == 1 and n >= intervals then return 'o' end
  if at > 1 and math.abs(ts - entries[at - 1][2]) < min_distance then
    local prev = entries[at - 1]        -- merge: keep its timestamp and first order
    prev[1], prev[3], prev[4], prev[5] = offset, observed, -1, order
    return 'm', encode_ring(entries)
  end
  table.insert(entries, at, {offset, ts, observed, -1, order, order})
  while #entries > intervals do table.remove(entries, 1) end
  return 'i', encode_ring(entries)
end

-- Returns the outcome letter and the new packed ring (nil when unchanged).
local function add(packed, offset, ts, order, observed, broker)
  if ts < now - expire_ms then return 'x' end
  if broker < 0 then return 'b' end
  local size = #packed
  local lag = math.max(0, broker - offset)
  if size == 0 then
    return 'a', struct.pack(ENTRY, offset, ts, observed, lag, order, order)
  end
  local _, last_ts, _, _, last_order, last_first = struct.unpack(ENTRY, packed, size - ENTRY_SIZE + 1)
  if order <= last_order then
    return insert_older(packed, offset, ts, order, observed)
  end
  -- The common case, a new newest entry, works on the bytes without decoding the ring.
  if math.abs(ts - last_ts) < min_distance then
    return 'm', string.sub(packed, 1, size - ENTRY_SIZE)
                .. struct.pack(ENTRY, offset, last_ts, observed, lag, order, last_first)
  end
  packed = packed .. struct.pack(ENTRY, offset, ts, observed, lag, order, order)
  local excess = #packed - intervals * ENTRY_SIZE
  if excess > 0 then packed = string.sub(packed, excess + 1) end
  return 'a', packed
end

local function add_group(windows_key, meta_key, owners_key, rebalances_key, commits)
  -- First pass: decode the commits and read every ring they touch with one HMGET.
  local parsed, fields, seen = {}, {}, {}
  local pos = 1
  while pos <= #commits do
    local offset, ts, order, observed, broker, field, next_pos = struct.unpack(COMMIT, commits, pos)
    pos = next_pos
    parsed[#parsed + 1] = {offset, ts, order, observed, broker, field}
    if not seen[field] then
      seen[field] = true
      fields[#fields + 1] = field
    end
  end
  local rings = {}
  for first = 1, #fields, MAX_UNPACK do
    local last = math.min(first + MAX_UNPACK - 1, #fields)
    local values = redis.call('HMGET', windows_key, unpack(fields, first, last))
    for i = first, last do rings[fields[i]] = values[i - first + 1] or '' end
  end
  -- Second pass: apply them in order.
  local dirty, outcomes = {}, {}
  local newest_ts = tonumber(redis.call('HGET', meta_key, 'last') or '-1')
  for i, c in ipairs(parsed) do
    local outcome, updated = add(rings[c[6]], c[1], c[2], c[3], c[4], c[5])
    if updated then
      rings[c[6]] = updated
      dirty[c[6]] = true
      if c[2] > newest_ts then newest_ts = c[2] end
    end
    outcomes[i] = outcome
  end
  local changes = {}
  for field in pairs(dirty) do
    changes[#changes + 1] = field
    changes[#changes + 1] = rings[field]
  end
  if #changes > 0 then
    for first = 1, #changes, MAX_UNPACK do
      redis.call('HSET', windows_key, unpack(changes, first, math.min(first + MAX_UNPACK - 1, #changes)))
    end
    redis.call('HSET', meta_key, 'last', newest_ts)
    local expires_at = newest_ts + expire_ms
    redis.call('PEXPIREAT', windows_key, expires_at)
    redis.call('PEXPIREAT', meta_key, expires_at)
    redis.call('PEXPIREAT', owners_key, expires_at)
    redis.call('PEXPIREAT', rebalances_key, expires_at)
  end
  return table.concat(outcomes)
end

local results = {}
for g = 0, #ARGV - FIRST_GROUP_ARG do
  local k = g * KEYS_PER_GROUP
  results[g + 1] = add_group(KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], ARGV[FIRST_GROUP_ARG + g])
end
return results
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

# KEYS: meta hash, owners hash, rebalances zset (of one group)
# ARGV: generation, started_at_ms, expire_ms, now_ms, rebalance_window_ms, then (field, "<owner>\\x1f<client_id>") pairs
# Replaces the group's partition owners; a new generation is remembered as one rebalance.
SET_GROUP_METADATA = """
local meta_key, owners_key, rebalances_key = KEYS[1], KEYS[2], KEYS[3]
local generation = ARGV[1]
local started_at = tonumber(ARGV[2])
local expire_ms = tonumber(ARGV[3])
local now = tonumber(ARGV[4])
local window_ms = tonumber(ARGV[5])
local FIRST_OWNER_ARG = 6

redis.call('DEL', owners_key)
for i = FIRST_OWNER_ARG, #ARGV, 2 do
  redis.call('HSET', owners_key, ARGV[i], ARGV[i + 1])
end
if redis.call('HGET', meta_key, 'generation') ~= generation then
  redis.call('HSET', meta_key, 'generation', generation)
  redis.call('ZADD', rebalances_key, started_at, generation)
end
redis.call('ZREMRANGEBYSCORE', rebalances_key, '-inf', '(' .. (now - window_ms))
-- Live as long as the group's windows do (or expire-group from now, before its first commit).
local last = tonumber(redis.call('HGET', meta_key, 'last') or now)
local expires_at = last + expire_ms
redis.call('PEXPIREAT', meta_key, expires_at)
redis.call('PEXPIREAT', owners_key, expires_at)
redis.call('PEXPIREAT', rebalances_key, expires_at)
return 1
"""

# KEYS: state hash, pending-events list (of one group)
# ARGV: expected seq, new status, incident_id ('' = none), incident_started_at, changed_at, event JSON, ttl_ms
# Compare-and-set of a group's status: applies only if the group's transition count is still `expected seq`, so
# two evaluators (or a restarted one) can never record, and publish, the same transition twice.
# Returns the new seq, or 0 when another evaluator got there first.
TRANSITION = """
local state_key, pending_key = KEYS[1], KEYS[2]
local expected_seq = tonumber(ARGV[1])
local status, incident_id, incident_started_at = ARGV[2], ARGV[3], ARGV[4]
local changed_at, event, ttl_ms = ARGV[5], ARGV[6], tonumber(ARGV[7])

local seq = tonumber(redis.call('HGET', state_key, 'seq') or '0')
if seq ~= expected_seq then return 0 end
redis.call('HSET', state_key, 'seq', seq + 1, 'status', status, 'changed_at', changed_at)
if incident_id == '' then
  redis.call('HDEL', state_key, 'incident_id', 'incident_started_at')
else
  redis.call('HSET', state_key, 'incident_id', incident_id, 'incident_started_at', incident_started_at)
end
redis.call('RPUSH', pending_key, event)
if status == 'NOTFOUND' then
  redis.call('PEXPIRE', state_key, ttl_ms)   -- remembered a while, so a returning group keeps counting
else
  redis.call('PERSIST', state_key)
end
return seq + 1
"""

# Renew-if-mine for the poller lease. KEYS: lease key; ARGV: owner id, ttl ms
RENEW_LEASE = """
local lease_key = KEYS[1]
local owner, ttl_ms = ARGV[1], ARGV[2]
if redis.call('SET', lease_key, owner, 'NX', 'PX', ttl_ms) then return 1 end
if redis.call('GET', lease_key) == owner then
  redis.call('PEXPIRE', lease_key, ttl_ms)
  return 1
end
return 0
"""

# Delete-if-mine. KEYS: lease key; ARGV: owner id
RELEASE_LEASE = """
local lease_key = KEYS[1]
local owner = ARGV[1]
if redis.call('GET', lease_key) == owner then return redis.call('DEL', lease_key) end
return 0
"""

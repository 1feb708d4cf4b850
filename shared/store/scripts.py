"""The store's Lua scripts, as named constants. Each binds KEYS/ARGV to named locals first.

ADD_COMMITS is the Lua twin of `lagwatch.shared.domain.window.add_commit`; the two must agree
(tests/shared/test_store.py replays random sequences through both). Ring layout: `packing.py`.
"""

from lagwatch.shared.domain.window import ADMIN_ORDERS_FROM, SOURCE_CLOCK_SKEW_MS

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

# window.py's constants for a window whose commits move from the admin poller to the offsets topic
_SOURCE_SWITCH = f"""
local ADMIN_ORDERS_FROM = {ADMIN_ORDERS_FROM}
local SOURCE_CLOCK_SKEW_MS = {SOURCE_CLOCK_SKEW_MS}
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
    + _SOURCE_SWITCH
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
  -- in a full ring a commit just after the oldest takes its place (window.add_commit); the gap is signed
  if at > 1 and not (at == 2 and n >= intervals) and ts - entries[at - 1][2] < min_distance then
    local prev = entries[at - 1]        -- merge: keep its timestamp and first order
    prev[1], prev[3], prev[4], prev[5] = offset, observed, -1, order
    return 'm', encode_ring(entries)
  end
  table.insert(entries, at, {offset, ts, observed, -1, order, order})
  while #entries > intervals do table.remove(entries, 1) end
  return 'i', encode_ring(entries)
end

-- A commit read from the offsets topic meeting a ring the admin poller numbered (window._continued_from_admin): nil
-- for one the poller already saw; otherwise the ring renumbered below the commit's order.
local function continued_from_admin(packed, offset, ts, order)
  local entries = decode_ring(packed)
  local n = #entries
  local newest = entries[n]
  if ts <= newest[2] or (offset <= newest[1] and ts <= newest[2] + SOURCE_CLOCK_SKEW_MS) then return nil end
  for i = 1, n - 1 do
    entries[i][5], entries[i][6] = i - n - 1, i - n - 1
  end
  newest[5], newest[6] = order - 1, -1
  return encode_ring(entries)
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
  if order < ADMIN_ORDERS_FROM and last_order >= ADMIN_ORDERS_FROM then
    packed = continued_from_admin(packed, offset, ts, order)
    if not packed then return 'd' end
    last_order, last_first = order - 1, -1
  end
  if order <= last_order then
    return insert_older(packed, offset, ts, order, observed)
  end
  -- The common case, a new newest entry, works on the bytes without decoding the ring.
  if ts - last_ts < min_distance then   -- signed: a commit stamped before the newest merges too
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

# KEYS: offset-history hash of one topic
# ARGV: max_age_ms, max_samples, sampled_at, then (partition, log-end offset) pairs
# The Lua twin of `lagwatch.shared.domain.time_lag.add_sample` (tests hold them to agreement): samples that are not
# later are dropped; a log end that went back (the topic re-created) starts the history afresh; a third equal offset in
# a row extends the flat stretch instead of adding a point; the front is trimmed to `max_age_ms` before the newest
# sample and to `max_samples`.
APPEND_OFFSET_HISTORY = """
local history_key = KEYS[1]
local max_age, max_samples, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local FIRST_PAIR_ARG = 4
local PAIR, PAIR_SIZE = '<i8i8', 16
for i = FIRST_PAIR_ARG, #ARGV, 2 do
  local partition, offset = ARGV[i], tonumber(ARGV[i + 1])
  local history = redis.call('HGET', history_key, partition) or ''
  local n = #history / PAIR_SIZE
  local keep = true
  if n > 0 then
    local last_offset, last_at = struct.unpack(PAIR, history, (n - 1) * PAIR_SIZE + 1)
    if now <= last_at then
      keep = false
    elseif offset < last_offset then   -- another log than the one the history describes
      history, n = '', 0
    elseif offset == last_offset and n >= 2 then
      local previous_offset = struct.unpack(PAIR, history, (n - 2) * PAIR_SIZE + 1)
      if previous_offset == last_offset then   -- the flat stretch now ends at this sample
        history = string.sub(history, 1, (n - 1) * PAIR_SIZE)
        n = n - 1
      end
    end
  end
  if keep then
    history = history .. struct.pack(PAIR, offset, now)
    n = n + 1
    local drop = 0
    while drop < n - 1 do
      local _, at = struct.unpack(PAIR, history, drop * PAIR_SIZE + 1)
      if at >= now - max_age then break end
      drop = drop + 1
    end
    drop = math.max(drop, n - max_samples)
    if drop > 0 then history = string.sub(history, drop * PAIR_SIZE + 1) end
    redis.call('HSET', history_key, partition, history)
  end
end
return 1
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

# The end of both rebalance scripts: a new generation counts as a rebalance; the keys live as long as the group's
# windows do (or expire-group from now, before its first commit).
_GENERATION_AND_EXPIRY_FN = """
local function set_generation(meta_key, owners_key, rebalances_key, generation, started_at, expire_ms, now, window_ms)
  if redis.call('HGET', meta_key, 'generation') ~= generation then
    redis.call('HSET', meta_key, 'generation', generation)
    redis.call('ZADD', rebalances_key, started_at, generation)
  end
  redis.call('ZREMRANGEBYSCORE', rebalances_key, '-inf', '(' .. (now - window_ms))
  local expires_at = tonumber(redis.call('HGET', meta_key, 'last') or now) + expire_ms
  redis.call('PEXPIREAT', meta_key, expires_at)
  redis.call('PEXPIREAT', owners_key, expires_at)
  redis.call('PEXPIREAT', rebalances_key, expires_at)
end
"""

# KEYS: a group's meta hash, owners hash, rebalances zset
# ARGV: generation, started at (ms), expire-group (ms), now (ms), rebalance window (ms), then pairs of field and
# "<owner>\\x1f<client_id>"
# A classic group's rebalance: its owners replace the group's. A new-protocol group's member state (fields `member:<id>`
# and `assigned:<id>` of the meta hash, APPLY_MEMBER_CHANGES) goes: the group went back to the classic protocol.
SET_GROUP_METADATA = (
    _GENERATION_AND_EXPIRY_FN
    + """
local meta_key, owners_key, rebalances_key = KEYS[1], KEYS[2], KEYS[3]
local FIRST_OWNER_ARG = 6

redis.call('DEL', owners_key)
for i = FIRST_OWNER_ARG, #ARGV, 2 do
  redis.call('HSET', owners_key, ARGV[i], ARGV[i + 1])
end
for _, name in ipairs(redis.call('HKEYS', meta_key)) do
  if string.sub(name, 1, 7) == 'member:' or string.sub(name, 1, 9) == 'assigned:' then
    redis.call('HDEL', meta_key, name)
  end
end
set_generation(meta_key, owners_key, rebalances_key, ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]),
               tonumber(ARGV[4]), tonumber(ARGV[5]))
return 1
"""
)

# KEYS: a group's meta hash, owners hash, rebalances zset
# ARGV: expire-group (ms), now (ms), rebalance window (ms), then a JSON list of the group's new-protocol records in
# order, each [member id, "m" or "a", value or null, time (ms)] (redis_store.MemberChange.operation).
# A member record ("m") keeps the member's "<host>\x1f<client id>" in the meta hash's `member:<id>` (null: it left,
# with its assignment); an assignment ("a") keeps {"epoch", "fields"} in `assigned:<id>` (null: none). The owners are
# then derived from every member kept, the generation is the highest epoch: whichever worker reads a group's next
# record changes that member's partitions only, whatever it did not read before (a restart, a rebalance of lagwatch).
APPLY_MEMBER_CHANGES = (
    _GENERATION_AND_EXPIRY_FN
    + """
local meta_key, owners_key, rebalances_key = KEYS[1], KEYS[2], KEYS[3]
local operations = cjson.decode(ARGV[4])
local started_at = tonumber(ARGV[2])
for _, op in ipairs(operations) do
  local id, kind, value = op[1], op[2], op[3]
  started_at = op[4]
  if value == cjson.null then
    if kind == 'm' then redis.call('HDEL', meta_key, 'member:' .. id) end
    redis.call('HDEL', meta_key, 'assigned:' .. id)
  elseif kind == 'm' then
    redis.call('HSET', meta_key, 'member:' .. id, value)
  else
    redis.call('HSET', meta_key, 'assigned:' .. id, cjson.encode(value))
  end
end
local members, assignments = {}, {}
local kept = redis.call('HGETALL', meta_key)
for i = 1, #kept, 2 do
  if string.sub(kept[i], 1, 7) == 'member:' then
    members[string.sub(kept[i], 8)] = kept[i + 1]
  elseif string.sub(kept[i], 1, 9) == 'assigned:' then
    assignments[string.sub(kept[i], 10)] = cjson.decode(kept[i + 1])
  end
end
redis.call('DEL', owners_key)
local generation = 0
for id, assigned in pairs(assignments) do
  generation = math.max(generation, assigned.epoch)
  for _, field in ipairs(assigned.fields) do
    redis.call('HSET', owners_key, field, members[id] or '\\31')
  end
end
set_generation(meta_key, owners_key, rebalances_key, string.format('%d', generation), started_at,
               tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]))
return 1
"""
)

# Compare-and-set of a group's status: applies only if the group's transition count is still `expected_seq`, so
# two evaluators (or a restarted one) can never record, and publish, the same transition twice.
# Returns the new seq, or 0 when another evaluator got there first.
_TRANSITION_FN = """
local function transition(state_key, pending_key, expected_seq, status, incident_id, incident_started_at,
                          changed_at, event, ttl_ms)
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
end
"""

# After a transition: the cluster's index of current statuses and its capped list of recent changes, together.
_RECORD_CHANGE_FN = """
local function record_change(index_key, recent_key, group, status, change, keep)
  if status == 'NOTFOUND' then
    redis.call('HDEL', index_key, group)
  else
    redis.call('HSET', index_key, group, status)
  end
  redis.call('LPUSH', recent_key, change)
  redis.call('LTRIM', recent_key, 0, keep - 1)
end
"""

# KEYS: state hash, pending-events list (of one group)
# ARGV: expected seq, new status, incident_id ('' = none), incident_started_at, changed_at, event JSON, ttl_ms
TRANSITION = (
    _TRANSITION_FN
    + """
return transition(KEYS[1], KEYS[2], tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], tonumber(ARGV[7]))
"""
)

# KEYS: statuses index, recent-changes list (of one cluster)
# ARGV: group, new status, change JSON, how many changes the list keeps
# After a TRANSITION. (They live in the cluster's slot, TRANSITION's keys in the group's, so on Redis Cluster this
# is a second call.)
RECORD_STATUS_CHANGE = (
    _RECORD_CHANGE_FN
    + """
record_change(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]))
return 1
"""
)

# TRANSITION and RECORD_STATUS_CHANGE for many groups in one call (a single Redis server: the keys span slots).
# KEYS: statuses index, recent-changes list, then per group its state hash and pending-events list
# ARGV: how many changes the list keeps, then per group: TRANSITION's 7 arguments, group, change JSON
# Returns per group what TRANSITION returns.
TRANSITIONS = (
    _TRANSITION_FN
    + _RECORD_CHANGE_FN
    + """
local keep = tonumber(ARGV[1])
local out = {}
for i = 3, #KEYS, 2 do
  local a = 2 + (i - 3) / 2 * 9
  local status = ARGV[a + 1]
  local seq = transition(KEYS[i], KEYS[i + 1], tonumber(ARGV[a]), status, ARGV[a + 2], ARGV[a + 3], ARGV[a + 4],
                         ARGV[a + 5], tonumber(ARGV[a + 6]))
  if seq > 0 then
    record_change(KEYS[1], KEYS[2], ARGV[a + 7], status, ARGV[a + 8], keep)
  end
  out[#out + 1] = seq
end
return out
"""
)

# KEYS: per group its state hash and outbox list. Returns per group {HGETALL of the state, LRANGE of the outbox}.
READ_STATES_AND_OUTBOXES = """
local out = {}
for i = 1, #KEYS, 2 do
  out[#out + 1] = redis.call('HGETALL', KEYS[i])
  out[#out + 1] = redis.call('LRANGE', KEYS[i + 1], 0, -1)
end
return out
"""

# KEYS: outbox lists, one per acknowledged event (a list repeats for each of its events); ARGV: the events, aligned.
ACKNOWLEDGE_EVENTS = """
for i = 1, #KEYS do
  redis.call('LREM', KEYS[i], 1, ARGV[i])
end
return #KEYS
"""

# KEYS: per-topic hashes (broker rings, offset histories); ARGV: per key, the fields to read, space-separated
# Returns per key HMGET's answer for its fields (asked 1000 at a time: Lua's unpack has a limit).
READ_TOPIC_FIELDS = """
local out = {}
for i = 1, #KEYS do
  local fields, values = {}, {}
  for f in string.gmatch(ARGV[i], '%S+') do fields[#fields + 1] = f end
  for j = 1, #fields, 1000 do
    local part = redis.call('HMGET', KEYS[i], unpack(fields, j, math.min(j + 999, #fields)))
    for _, v in ipairs(part) do values[#values + 1] = v end
  end
  out[i] = values
end
return out
"""

# KEYS: per group its windows hash, metadata hash, owners hash and rebalances sorted set (`keys.group_keys`)
# ARGV: the earliest rebalance start to count (ms)
# Returns per group {HGETALL windows, HMGET metadata last generation, HGETALL owners, ZCOUNT rebalances}.
READ_GROUPS = """
local since = ARGV[1]
local out = {}
for i = 1, #KEYS, 4 do
  out[#out + 1] = redis.call('HGETALL', KEYS[i])
  out[#out + 1] = redis.call('HMGET', KEYS[i + 1], 'last', 'generation')
  out[#out + 1] = redis.call('HGETALL', KEYS[i + 2])
  out[#out + 1] = redis.call('ZCOUNT', KEYS[i + 3], since, '+inf')
end
return out
"""

# KEYS: lag-thresholds hash, pending lag-events list (of one group)
# ARGV: threshold field, expected seq, new seq, incident_started_at, event JSON, ttl_ms
# Compare-and-set of one threshold's crossing count, with the event in the outbox: like TRANSITION, two evaluators
# (or a restarted one) never record, and publish, the same crossing twice. The hash lives while the group is over
# some threshold and expires `ttl_ms` after its last crossing once it is under every one.
# Returns 1 when recorded, 0 when another evaluator got there first.
RECORD_LAG_CROSSING = """
local state_key, pending_key = KEYS[1], KEYS[2]
local field, expected_seq, new_seq = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local started_at, event, ttl_ms = ARGV[4], ARGV[5], tonumber(ARGV[6])

local function seq_of(value) return tonumber(string.match(value or '0', '^(%d+)')) end

if seq_of(redis.call('HGET', state_key, field)) ~= expected_seq then return 0 end
redis.call('HSET', state_key, field, new_seq .. ':' .. started_at)
redis.call('RPUSH', pending_key, event)
local over_any = false
for _, value in ipairs(redis.call('HVALS', state_key)) do
  if seq_of(value) % 2 == 1 then over_any = true; break end
end
if over_any then redis.call('PERSIST', state_key) else redis.call('PEXPIRE', state_key, ttl_ms) end
return 1
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

# Which Kafka cluster a name stands for (services/ingest/kafka_identity.py). KEYS: the id recorded; ARGV: the id
# Kafka gave. Returns {verdict, the id recorded}: "same"; "first" (none recorded: this one is, from now on);
# "other" (another is recorded: its data is forgotten under the lease RENEW_LEASE takes, then the id set)
CLAIM_KAFKA_ID = """
local id_key, seen = KEYS[1], ARGV[1]
local recorded = redis.call('GET', id_key)
if recorded == seen then return {'same', recorded} end
if not recorded then
  redis.call('SET', id_key, seen)
  return {'first', seen}
end
return {'other', recorded}
"""

# Delete-if-mine. KEYS: lease key; ARGV: owner id
RELEASE_LEASE = """
local lease_key = KEYS[1]
local owner = ARGV[1]
if redis.call('GET', lease_key) == owner then return redis.call('DEL', lease_key) end
return 0
"""

# Delete a hash's field only while it holds what was read (a newer value written meanwhile stays). KEYS: the hash;
# ARGV: field, value read
DROP_FIELD_IF_UNCHANGED = """
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then return redis.call('HDEL', KEYS[1], ARGV[1]) end
return 0
"""

# --- the notifier's outbox (keys: shared/store/keys.py, all in the `{notify}` slot) --------------------------------

# One incident's notifications to one subscription (a chain: a 32-hex-digit name, `outbox.chain_of`) go out in the
# order they were recorded: a retried open must not arrive after its close. Keys: shared/store/keys.py OUTBOX_ORDER,
# OUTBOX_CHAIN_OF, OUTBOX_SEQ. A delivery is claimed only while it is its chain's head.
_CHAIN_FNS = """
local CHAIN_NAME = 32
local function chain_add(order_key, chain_of_key, seq_key, chain, id)
  if chain == '' then return end
  local entry = chain .. ':' .. string.format('%020d', redis.call('INCR', seq_key)) .. ':' .. id
  redis.call('ZADD', order_key, 0, entry)
  redis.call('HSET', chain_of_key, id, entry)
end
-- the chain's first delivery still in the outbox (entries of deliveries gone some other way are dropped)
local function chain_head(order_key, chain_of_key, deliveries_key, chain)
  while true do
    local first = redis.call('ZRANGEBYLEX', order_key, '[' .. chain .. ':', '(' .. chain .. ';', 'LIMIT', 0, 1)[1]
    if not first then return nil end
    local id = string.sub(first, CHAIN_NAME + 23)
    if redis.call('HEXISTS', deliveries_key, id) == 1 then return id end
    redis.call('ZREM', order_key, first)
    redis.call('HDEL', chain_of_key, id)
  end
end
"""

# KEYS: state hash of the subscription, seen key of (event, subscription), due zset, deliveries hash, repeats zset,
#       order zset, chain-of hash, seq counter
# ARGV: "<cluster>/<group>", expected state JSON ('' = none), new state JSON ('' = forget), delivery id
#       ('' = nothing to send), delivery JSON, due at ms, seen ttl ms, repeats member, next repeat ms ('' = none),
#       the incident's chain
# Records what one status-change event means for one subscription, once: the incident state, the delivery in the
# outbox and the repeat schedule together. Returns 1 applied, 0 already handled (a redelivered event), -1 the state
# changed since it was read (the caller decides again).
RECORD_NOTIFICATION = (
    _CHAIN_FNS
    + """
local state_key, seen_key, due_key, deliveries_key, repeats_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local field, expected, new_state = ARGV[1], ARGV[2], ARGV[3]
local delivery_id, delivery, due_at = ARGV[4], ARGV[5], ARGV[6]
local seen_ttl_ms, repeat_member, repeat_at = ARGV[7], ARGV[8], ARGV[9]

if redis.call('EXISTS', seen_key) == 1 then return 0 end
local current = redis.call('HGET', state_key, field) or ''
if current ~= expected then return -1 end
if new_state == '' then
  redis.call('HDEL', state_key, field)
else
  redis.call('HSET', state_key, field, new_state)
end
if delivery_id ~= '' and redis.call('HSETNX', deliveries_key, delivery_id, delivery) == 1 then
  redis.call('ZADD', due_key, 'NX', due_at, delivery_id)
  chain_add(KEYS[6], KEYS[7], KEYS[8], ARGV[10], delivery_id)
end
if repeat_at == '' then
  redis.call('ZREM', repeats_key, repeat_member)
else
  redis.call('ZADD', repeats_key, repeat_at, repeat_member)
end
redis.call('SET', seen_key, '1', 'PX', seen_ttl_ms)
return 1
"""
)

# KEYS: repeats zset, due zset, deliveries hash, order zset, chain-of hash, seq counter
# ARGV: repeats member, its score as read, next repeat ms ('' = stop repeating), delivery id, delivery JSON, now ms,
#       the incident's chain
# One repeat per due slot, whichever notifier instance asks first: applies only while the member's score is still the
# one read. Returns 1 when a repeat was enqueued, 2 when the schedule moved on without one (an earlier notification
# of the incident is still in the outbox).
SCHEDULE_REPEAT = (
    _CHAIN_FNS
    + """
local repeats_key, due_key, deliveries_key = KEYS[1], KEYS[2], KEYS[3]
local member, seen_score, next_at = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local delivery_id, delivery, now = ARGV[4], ARGV[5], ARGV[6]

local score = redis.call('ZSCORE', repeats_key, member)
if not score or tonumber(score) ~= seen_score then return 0 end
if next_at == '' then
  redis.call('ZREM', repeats_key, member)
  return 0
end
redis.call('ZADD', repeats_key, next_at, member)
-- a notification of the incident not delivered yet (its receiver down): a repeat behind it says nothing new, and
-- after a long outage every one queued would go out at once
if ARGV[7] ~= '' and chain_head(KEYS[4], KEYS[5], deliveries_key, ARGV[7]) then return 2 end
if redis.call('HSETNX', deliveries_key, delivery_id, delivery) == 1 then
  redis.call('ZADD', due_key, 'NX', now, delivery_id)
  chain_add(KEYS[4], KEYS[5], KEYS[6], ARGV[7], delivery_id)
end
return 1
"""
)

# KEYS: due zset, deliveries hash
# ARGV: delivery id, delivery JSON, due at ms
# Puts a delivery into the outbox unless one with that id is still there (replayed dead letters). Returns 1 if added.
ENQUEUE_DELIVERY = """
local due_key, deliveries_key = KEYS[1], KEYS[2]
local delivery_id, delivery, due_at = ARGV[1], ARGV[2], ARGV[3]
if redis.call('HSETNX', deliveries_key, delivery_id, delivery) == 0 then return 0 end
redis.call('ZADD', due_key, 'NX', due_at, delivery_id)
return 1
"""

# Leases of claimed deliveries run on Redis's clock, not the workers': a worker whose clock is ahead by more than
# the lease would otherwise take the deliveries others are sending (a second send), and one whose clock is behind
# would renew leases already over. `due` times stay the workers' (a skew only moves a retry by as much).
_SERVER_MS = """
local function server_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"""

# KEYS: due zset, inflight zset, deliveries hash, order zset, chain-of hash
# ARGV: now ms, lease ms, max deliveries, ms a delivery behind an earlier one of its chain waits to be looked at again
# Claims due deliveries for one worker: each moves from `due` to `inflight` with a lease (visibility timeout, on
# Redis's clock). Deliveries whose lease ran out (their worker died) go back to `due` first. A delivery behind an
# earlier one of its chain stays in `due`, looked at again later (FINISH_DELIVERY makes it due at once when its turn
# comes). Returns id, JSON, id, JSON, ..., then when the earliest delivery left in `due` is due (ms; '' when none),
# so an idle worker knows how long to wait.
CLAIM_DELIVERIES = (
    _CHAIN_FNS
    + _SERVER_MS
    + """
local due_key, inflight_key, deliveries_key, order_key, chain_of_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local now, lease_ms, limit, wait_ms = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local lease_now = server_ms()

for _, id in ipairs(redis.call('ZRANGEBYSCORE', inflight_key, '-inf', '(' .. lease_now, 'LIMIT', 0, 1000)) do
  redis.call('ZREM', inflight_key, id)
  redis.call('ZADD', due_key, now, id)
end
local claimed = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', due_key, '-inf', now, 'LIMIT', 0, limit)) do
  local entry = redis.call('HGET', chain_of_key, id)
  local head = id
  if entry then head = chain_head(order_key, chain_of_key, deliveries_key, string.sub(entry, 1, CHAIN_NAME)) end
  if head ~= id then
    redis.call('ZADD', due_key, now + wait_ms, id)
  else
    redis.call('ZREM', due_key, id)
    local delivery = redis.call('HGET', deliveries_key, id)
    if delivery then
      redis.call('ZADD', inflight_key, lease_now + lease_ms, id)
      claimed[#claimed + 1] = id
      claimed[#claimed + 1] = delivery
    end
  end
end
local earliest = redis.call('ZRANGE', due_key, 0, 0, 'WITHSCORES')
claimed[#claimed + 1] = earliest[2] or ''
return claimed
"""
)

# KEYS: inflight zset
# ARGV: lease ms, then delivery ids
# A worker extends the leases of the deliveries it holds, those still in flight (one whose lease lapsed and that a
# claim put back in `due` is not renewed).
RENEW_DELIVERY_LEASES = (
    _SERVER_MS
    + """
local inflight_key, lease_ms = KEYS[1], tonumber(ARGV[1])
local expiry = server_ms() + lease_ms
for i = 2, #ARGV do
  redis.call('ZADD', inflight_key, 'XX', expiry, ARGV[i])
end
return 0
"""
)

# KEYS: due zset, inflight zset, deliveries hash, order zset, chain-of hash
# ARGV: delivery id, now ms
# Delivered or dead-lettered: out of the outbox; the next delivery of its chain, if any, is due at once.
FINISH_DELIVERY = (
    _CHAIN_FNS
    + """
local due_key, inflight_key, deliveries_key, order_key, chain_of_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id, now = ARGV[1], ARGV[2]
redis.call('ZREM', inflight_key, id)
redis.call('ZREM', due_key, id)
redis.call('HDEL', deliveries_key, id)
local entry = redis.call('HGET', chain_of_key, id)
if entry then
  redis.call('ZREM', order_key, entry)
  redis.call('HDEL', chain_of_key, id)
  local next_id = chain_head(order_key, chain_of_key, deliveries_key, string.sub(entry, 1, CHAIN_NAME))
  if next_id and redis.call('ZSCORE', due_key, next_id) then redis.call('ZADD', due_key, 'LT', now, next_id) end
end
return 1
"""
)

# KEYS: due zset, inflight zset, deliveries hash
# ARGV: delivery id, next attempt ms, delivery JSON (attempts and last error updated)
# A failed attempt: back into `due` at the retry time, unless the delivery was meanwhile finished.
RESCHEDULE_DELIVERY = """
local due_key, inflight_key, deliveries_key = KEYS[1], KEYS[2], KEYS[3]
local delivery_id, next_at, delivery = ARGV[1], ARGV[2], ARGV[3]
if redis.call('HEXISTS', deliveries_key, delivery_id) == 0 then return 0 end
redis.call('HSET', deliveries_key, delivery_id, delivery)
redis.call('ZREM', inflight_key, delivery_id)
redis.call('ZADD', due_key, next_at, delivery_id)
return 1
"""

# KEYS: due zset, inflight zset
# ARGV: now ms, then delivery ids
# A stopping worker hands back what it holds: due at once, for the next worker.
RELEASE_DELIVERIES = """
local due_key, inflight_key = KEYS[1], KEYS[2]
local now = ARGV[1]
local released = 0
for i = 2, #ARGV do
  if redis.call('ZREM', inflight_key, ARGV[i]) == 1 then
    redis.call('ZADD', due_key, now, ARGV[i])
    released = released + 1
  end
end
return released
"""

# A running service instance says so (shared/store/presence.py): its entry holds until ARGV[2] ms from now on Redis's
# clock (the instances' clocks may disagree by more than that), and those past theirs (an instance killed) go.
# KEYS: the instances' zset; ARGV: instance id, ms its entry holds
ANNOUNCE_PRESENCE = (
    _SERVER_MS
    + """
local key, now, hold_ms = KEYS[1], server_ms(), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
redis.call('ZADD', key, now + hold_ms, ARGV[1])
if redis.call('PTTL', key) < hold_ms then redis.call('PEXPIRE', key, hold_ms) end  -- the key goes with the last word
return 0
"""
)

# The instances whose entries hold now, on Redis's clock. KEYS: the instances' zset
PRESENT_INSTANCES = (
    _SERVER_MS
    + """
return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. server_ms(), '+inf')
"""
)

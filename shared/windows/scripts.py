"""The windows' Lua scripts, as named constants; each binds KEYS/ARGV to named locals first. Ring layout:
`packing.py`. (Commits are applied in Python, not here: `group_windows.py`.)
"""

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
# The Lua twin of `lagwatch.shared.statuses.time_lag.add_sample` (tests hold them to agreement): samples that are not
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

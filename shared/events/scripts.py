"""The events' Lua scripts: a status change or a lag crossing recorded once, with its event in the group's
outbox, and the outbox read and acknowledged."""

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

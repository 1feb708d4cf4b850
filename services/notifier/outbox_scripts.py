"""The notifier outbox's Lua scripts (keys: shared/protocol/keys.py, all in the `{notify}` slot)."""

from lagwatch.shared.runtime.lua import SERVER_MS as _SERVER_MS

# Delete a hash's field only while it holds what was read (a newer value written meanwhile stays). KEYS: the hash;
# ARGV: field, value read
DROP_FIELD_IF_UNCHANGED = """
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then return redis.call('HDEL', KEYS[1], ARGV[1]) end
return 0
"""

# One incident's notifications to one subscription (a chain: a 32-hex-digit name, `outbox.chain_of`) go out in the
# order they were recorded: a retried open must not arrive after its close. Keys: shared/protocol/keys.py OUTBOX_ORDER,
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

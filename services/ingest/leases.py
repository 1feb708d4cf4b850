"""The ingest's leases in Redis (the broker poller's, the Kafka identity's), as Lua constants."""

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

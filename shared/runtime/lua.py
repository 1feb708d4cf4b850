"""Lua pieces several scripts share."""

# Leases of claimed deliveries run on Redis's clock, not the workers': a worker whose clock is ahead by more than
# the lease would otherwise take the deliveries others are sending (a second send), and one whose clock is behind
# would renew leases already over. `due` times stay the workers' (a skew only moves a retry by as much).
SERVER_MS = """
local function server_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"""

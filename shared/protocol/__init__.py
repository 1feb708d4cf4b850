"""What the stages exchange: statuses, commits and window entries (types.py), the Redis key layout (keys.py), and
which groups are watched (group_filter.py). Plain data, no I/O; imports nothing of lagwatch."""

"""Storage: the one Redis connection, its key layout (keys.py) and Lua scripts (scripts.py), the stores built on
them (windows, statuses, schedules, outboxes, ingest totals), and the Parquet files of the history."""

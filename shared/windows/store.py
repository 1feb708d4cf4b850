"""The window store on Redis: the windows of docs/rules.md §2, persisted, atomic and batched, by what is done with
them: read (`window_reads.py`), written (`window_writes.py`) and deleted (`window_deletions.py`). Commits are stored
as the ingest stores them (`group_windows.py`), a group's read and write one transaction. Key layout: `keys.py`.
"""

from __future__ import annotations

from redis.asyncio import Redis

from lagwatch.shared.protocol.types import WindowConfig
from lagwatch.shared.windows.window_deletions import WindowDeletions
from lagwatch.shared.windows.window_reads import WindowReads
from lagwatch.shared.windows.window_writes import WindowWrites


class WindowStore:
    """Every window of every cluster in one Redis (or Redis Cluster) database: its reads, writes and deletions."""

    def __init__(self, redis: Redis, config: WindowConfig | None = None) -> None:
        self.redis = redis
        self.config = config or WindowConfig()
        self.reads = WindowReads(redis)
        self.writes = WindowWrites(self.reads, self.config)
        self.deletions = WindowDeletions(self.reads, self.config)

"""Window storage: the Redis-backed window store, its key layout and its Lua scripts."""

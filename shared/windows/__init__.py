"""Where a commit becomes a window: the reference window (window.py), its packed ring (packing.py), a group's windows
as their writer reads, changes and writes them (group_windows.py), the Redis store (store.py: window_reads.py,
window_writes.py, window_deletions.py; the groups it reads, stored_group.py) with its Lua (scripts.py, script_calls.py),
the changes topic that says which groups moved (changes.py), how far the ingest has read
(read_through*.py) and the ingest's totals."""

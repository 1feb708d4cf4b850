"""Where a status change becomes an event: the status and lag-threshold events (their Structs, codec and JSON
Schemas), recorded once in Redis with the group's outbox (status_store.py, group_outbox.py, scripts.py), and the
keyed sends that publish them (deliveries.py)."""

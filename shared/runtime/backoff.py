"""The one back-off curve, for every retry in lagwatch: services waiting for Redis or Kafka (`Backoff` in
service_lifecycle.py), the ingest's supervisor restarting a worker, the notifier's delivery retries (with its
jitter). No imports: the supervisor stays a small process."""


def doubling(first: float, cap: float, failures: int) -> float:
    """The nominal pause after `failures` failures in a row beyond the first (0: `first`), doubling each time, never
    more than `cap` (a recovered dependency is noticed within it)."""
    return min(cap, first * (1 << min(max(0, failures), 62)))

"""Which lag-seconds thresholds are in force: the subscriptions' `lag-seconds-threshold`s, from the configuration
file and from the api. The api's are indexed in Redis (`lw:n:{notify}:lag-thresholds`: subscription id -> JSON
`{"seconds", "clusters"}`), written by the subscription store with each subscription and read by the evaluators,
which need the numbers, not the subscriptions."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from lagwatch.shared.config import SubscriptionConfig


def index_entry(config: SubscriptionConfig) -> str | None:
    """A subscription's entry in the index (None: it has no lag-seconds threshold)."""
    if config.lag_seconds_threshold <= 0:
        return None
    return json.dumps({"seconds": config.lag_seconds_threshold, "clusters": config.clusters}, sort_keys=True)


def parse_index_entry(raw: bytes | str) -> tuple[float, list[str]] | None:
    """(seconds, clusters) of an index entry; None when it is not one."""
    try:
        doc = json.loads(raw)
        return float(doc["seconds"]), [str(c) for c in doc.get("clusters") or []]
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def thresholds_for(cluster: str, entries: Iterable[tuple[float, Sequence[str]]]) -> frozenset[float]:
    """The thresholds in force for a cluster, from (seconds, clusters) pairs (no clusters = every cluster)."""
    return frozenset(float(s) for s, clusters in entries if s > 0 and (not clusters or cluster in clusters))

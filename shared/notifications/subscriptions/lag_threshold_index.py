"""Which alert thresholds are in force: the subscriptions' `lag-seconds-threshold`s and `retention-risk-threshold`s
(lag_threshold_event.py: one subscription's `Threshold`s), from the configuration file and from the api. The api's
are indexed in Redis (`lw:n:{notify}:lag-thresholds`: subscription id -> JSON `{"seconds", "retention_seconds",
"clusters"}`), written by the subscription store with each subscription and read by the evaluators, which need the
numbers, not the subscriptions."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from lagwatch.shared.events.lag_threshold_event import Threshold, subscription_thresholds
from lagwatch.shared.runtime.config import SubscriptionConfig


def thresholds_of(config: SubscriptionConfig) -> list[Threshold]:
    return subscription_thresholds(config.lag_seconds_threshold, config.retention_risk_threshold)


def index_entry(config: SubscriptionConfig) -> str | None:
    """A subscription's entry in the index (None: it has no threshold)."""
    if not thresholds_of(config):
        return None
    doc = {"seconds": config.lag_seconds_threshold, "clusters": config.clusters}
    if config.retention_risk_threshold > 0:  # entries without it read as before
        doc["retention_seconds"] = config.retention_risk_threshold
    return json.dumps(doc, sort_keys=True)


def parse_index_entry(raw: bytes | str) -> tuple[list[Threshold], list[str]] | None:
    """(thresholds, clusters) of an index entry; None when it is not one."""
    try:
        doc = json.loads(raw)
        lag, retention = float(doc["seconds"]), float(doc.get("retention_seconds") or 0)
        return subscription_thresholds(lag, retention), [str(c) for c in doc.get("clusters") or []]
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def thresholds_for(cluster: str, entries: Iterable[tuple[Sequence[Threshold], Sequence[str]]]) -> frozenset[Threshold]:
    """The thresholds in force for a cluster, from (thresholds, clusters) pairs (no clusters = every cluster)."""
    return frozenset(t for ts, clusters in entries if not clusters or cluster in clusters for t in ts)

"""Which consumer groups a subscription is about: its `clusters` (none listed: every cluster) and its group allow
and deny regexes (unanchored search). One definition for the notifier, which decides by it, and the api, which
tells whoever writes a subscription how many of the groups known now it covers: a typo in a regex would otherwise
cover none, and nothing would say so until the incident nobody hears of."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lagwatch.shared.protocol.group_filter import GroupFilter
from lagwatch.shared.runtime.config import SubscriptionConfig


@dataclass(frozen=True)
class Coverage:
    clusters: frozenset[str]  # empty: every cluster
    groups: GroupFilter

    @classmethod
    def of(cls, config: SubscriptionConfig) -> Coverage:
        return cls(frozenset(config.clusters), GroupFilter(config.group_allowlist, config.group_denylist, linear=True))

    def covers(self, cluster: str, group: str) -> bool:
        return (not self.clusters or cluster in self.clusters) and self.groups.accepts(group)

    def count(self, known: Mapping[str, Iterable[str]]) -> int:
        """How many of the `known` groups (cluster -> group names) it covers."""
        return sum(1 for cluster, groups in known.items() for group in groups if self.covers(cluster, group))

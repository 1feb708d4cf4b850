"""How long events have waited for Kafka: `lagwatch_evaluator_unsent_events_seconds{cluster}`.

An event (a status change, or a lag-threshold crossing on its own topic) that Kafka does not take (a partition
without its leader, the topic refused, Kafka away) stays in its group's outbox and is sent again at the group's next
evaluation, every few seconds: nothing is lost, but no notifier and no status-topic reader hears of it meanwhile,
and aiokafka keeps retrying a record whose leader is away without ever failing it, so
`lagwatch_events_publish_failures_total` may not move at all. This gauge says how long the oldest of them has
waited: since this evaluator first found its group's events unsent, for the groups it is still retrying (looked at
within `FORGOTTEN_S`: a group another instance took over, or one deleted, no longer counts). An evaluator restarted
meanwhile counts from its own first try.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Iterable

from prometheus_client import Gauge

UNSENT_SECONDS = Gauge(
    "lagwatch_evaluator_unsent_events_seconds",
    "How long the oldest event (status change, lag-threshold crossing) this evaluator retries has waited for Kafka "
    "to take it (0: none waiting)",
    ["cluster"],
)
FORGOTTEN_S = 30.0  # a group retried every few seconds is looked at well within this; one not, is no longer ours


class UnsentEvents:
    """Per cluster: the groups whose events wait (a group's name, or a name and which of its outboxes), since when
    (time.monotonic) and when last looked at."""

    def __init__(self, cluster: str) -> None:
        self._waiting: dict[Hashable, tuple[float, float]] = {}  # group -> (first found unsent, last looked at)
        UNSENT_SECONDS.labels(cluster).set_function(self.oldest_seconds)

    def published(self, unsent: Iterable[Hashable], sent: Iterable[Hashable]) -> None:
        """After a publish: the groups whose events (some of them) are still unsent, and those all sent."""
        now = time.monotonic()
        for group in sent:
            self._waiting.pop(group, None)
        for group in unsent:
            first, _ = self._waiting.get(group, (now, now))
            self._waiting[group] = (first, now)

    def oldest_seconds(self) -> float:
        now = time.monotonic()
        self._waiting = {g: seen for g, seen in self._waiting.items() if now - seen[1] <= FORGOTTEN_S}
        return max((now - first for first, _ in self._waiting.values()), default=0.0)

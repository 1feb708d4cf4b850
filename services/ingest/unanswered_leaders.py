"""Partitions whose leader did not answer the log-end poll: said when that changes, not at every poll.

While one broker is away every poll fails the same way for its partitions: a warning each would be noise. The set is
said as an outage (`OutageLog`): when it begins or grows, a reminder while it lasts, a line when it ends.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from prometheus_client import Gauge

from lagwatch.shared.runtime.outage_log import OutageLog

log = logging.getLogger(__name__)
TP = tuple[str, int]
NAMES_SHOWN = 5  # partitions named in a line; the count says the rest
CONSEQUENCE = (
    "their log-end samples wait, and a commit of a partition never sampled is dropped (counted as no_broker_offset); "
    "the other partitions go on"
)

UNANSWERED = Gauge(
    "lagwatch_ingest_partitions_unanswered",
    "Partitions whose leader did not answer this worker's last log-end request (their samples wait)",
    ["cluster"],
)


class UnansweredLeaders:
    """The partitions of one cluster whose leader did not answer the last request for them."""

    def __init__(self, cluster: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.cluster = cluster
        self.partitions: set[TP] = set()
        self._outage = OutageLog(
            log,
            f"broker offsets for {cluster}: the partition leaders did not answer",
            ended=f"broker offsets for {cluster}: every partition leader answers again",
            clock=clock,
        )

    def record(self, asked: Iterable[TP], unanswered: Iterable[TP]) -> None:
        """One request's outcome: `asked` were requested, `unanswered` of them got no answer from their leader
        (partitions Kafka answered for, even with an error, are answered)."""
        missing = set(unanswered)
        new = missing - self.partitions
        self.partitions = (self.partitions - set(asked)) | missing
        if missing:
            self._outage.failed(self._names(new or self.partitions), CONSEQUENCE, news=bool(new))
        elif not self.partitions:
            self._outage.ok()
        UNANSWERED.labels(self.cluster).set(len(self.partitions))

    def keep_only(self, topics: Iterable[str]) -> None:
        """Forget the partitions of topics that no longer exist (nothing will ask for them again)."""
        known = set(topics)
        self.partitions = {tp for tp in self.partitions if tp[0] in known}
        UNANSWERED.labels(self.cluster).set(len(self.partitions))

    def forget(self) -> None:
        """This worker stopped polling (another holds the poller lease): what it saw is no longer its to say."""
        self.partitions = set()
        self._outage.reset()  # (should it poll again, what it finds then is a new outage)
        UNANSWERED.labels(self.cluster).set(0)

    def _names(self, partitions: set[TP]) -> str:
        names = ", ".join(f"{t}[{p}]" for t, p in sorted(partitions)[:NAMES_SHOWN])
        more = ", ..." if len(partitions) > NAMES_SHOWN else ""
        return f"{names}{more}; {len(self.partitions)} in all"

"""Partitions whose leader did not answer the log-end poll: said when that changes, not at every poll.

While one broker is away (a rolling restart, a crash, an offline partition) every log-end poll (`offset-refresh`,
10 s by default) and every batch that looks up a partition it leads failed the same way, and each logged a warning:
the line that said what was wrong was repeated until it was noise. The set of partitions without an answer is kept
here instead: a warning when partitions join it, a reminder every REMIND_S while it lasts (as `OutageLog` says an
outage), a line when every leader answers again; `lagwatch_ingest_partitions_unanswered` says how many there are now.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from prometheus_client import Gauge

from lagwatch.shared.runtime.outage_log import REMIND_S

log = logging.getLogger(__name__)
TP = tuple[str, int]
NAMES_SHOWN = 5  # partitions named in a line; the count says the rest

UNANSWERED = Gauge(
    "lagwatch_ingest_partitions_unanswered",
    "Partitions whose leader did not answer this worker's last log-end request (their samples wait)",
    ["cluster"],
)


class UnansweredLeaders:
    """The partitions of one cluster whose leader did not answer the last request for them."""

    def __init__(self, cluster: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.cluster = cluster
        self.clock = clock
        self.partitions: set[TP] = set()
        self._since = 0.0  # when the set last went from empty to not
        self._said_at = 0.0

    def record(self, asked: Iterable[TP], unanswered: Iterable[TP]) -> None:
        """One request's outcome: `asked` were requested, `unanswered` of them got no answer from their leader
        (partitions Kafka answered for, even with an error, are answered)."""
        missing = set(unanswered)
        new = missing - self.partitions
        before = bool(self.partitions)
        self.partitions = (self.partitions - set(asked)) | missing
        now = self.clock()
        if new:
            self._since = now if not before else self._since
            self._say(f"did not answer for {len(new)} more partitions", new, now)
        elif self.partitions and now - self._said_at >= REMIND_S:
            self._say(f"still have not answered, for {now - self._since:.0f} s", self.partitions, now)
        elif before and not self.partitions:
            log.info(
                "broker offsets for %s: every partition leader answers again (after %.0f s)",
                self.cluster,
                now - self._since,
            )
        UNANSWERED.labels(self.cluster).set(len(self.partitions))

    def keep_only(self, topics: Iterable[str]) -> None:
        """Forget the partitions of topics that no longer exist (nothing will ask for them again)."""
        known = set(topics)
        self.partitions = {tp for tp in self.partitions if tp[0] in known}
        UNANSWERED.labels(self.cluster).set(len(self.partitions))

    def forget(self) -> None:
        """This worker stopped polling (another holds the poller lease): what it saw is no longer its to say."""
        self.partitions = set()
        UNANSWERED.labels(self.cluster).set(0)

    def _say(self, what: str, partitions: set[TP], now: float) -> None:
        self._said_at = now
        names = ", ".join(f"{t}[{p}]" for t, p in sorted(partitions)[:NAMES_SHOWN])
        log.warning(
            "broker offsets for %s: the leaders %s (%s%s; %d in all): their log-end samples wait, and a commit of a "
            "partition never sampled is dropped (counted as no_broker_offset); the other partitions go on",
            self.cluster,
            what,
            names,
            ", ..." if len(partitions) > NAMES_SHOWN else "",
            len(self.partitions),
        )

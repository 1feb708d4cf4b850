"""How far commit timestamps are from lagwatch's clock, per group coordinator.

A commit's timestamp is stamped by its group's coordinator: the broker leading the group's offsets-topic partition
(`offsets_partition_of`). Each broker has its own clock, so the offset is kept per offsets partition: one broker's
clock off by an hour moves the rules only for the groups it coordinates, not for the whole cluster.

`ClockOffset` is one coordinator's: the smallest `observed_at - timestamp` over the last SPAN_MS (a sliding minimum).
A commit read moments after it was made gives the two clocks' offset plus the reader's delay, never less; the
smallest is the offset. Kept by the ingest (services/ingest/commit_clock.py, over batches read at the log end) and by
the replay (spark/replay.py, over a group's commits read once), so that both place a commit on lagwatch's clock the
same way (window.commit_made_at). `CoordinatorClocks` is what the ingest stores for the rules' readers.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

# longer than a stall of the reader (a Redis failover, a pause for CPU), which would otherwise be taken for the
# offset; short enough that a clock set right, or a coordinator moved to a broker with another clock, is followed
# within minutes
SPAN_MS = 5 * 60_000
# An estimate is the clocks' offset plus the reader's smallest delay over the span: below this, behind, the delay is
# the likelier part (a reader short of CPU for minutes is late on every commit), and taking it for the clock would
# place late commits when they were read, the very error the lag at append corrects. So the rules take such commit
# times as on lagwatch's clock, as Burrow does. A clock ahead is certain at any size (a delay is never negative).
# The LagwatchCommitClockBehind/Ahead alerts and the explanation use the same bound.
CLOCK_OFF_MS = 60_000
# the stored hash's fields: the offsets topic's partition count, and one offset per offsets partition
PARTITIONS_FIELD = "partitions"
OFFSET_FIELD_PREFIX = "offset:"


class ClockOffset:
    def __init__(self) -> None:
        # (observed_at, offset), offsets increasing: the first is the smallest of the span
        self._minima: deque[tuple[int, int]] = deque()

    @property
    def ms(self) -> int | None:
        """None until a commit was seen; held while none comes (a quiet coordinator keeps its last estimate)."""
        return self._minima[0][1] if self._minima else None

    @property
    def applied_ms(self) -> int | None:
        """The offset the rules apply (`applied_offset`)."""
        return applied_offset(self.ms)

    def add(self, observed_at: int, offset: int) -> None:
        """A commit (or a batch's newest) observed at `observed_at`, `offset` after its timestamp."""
        minima = self._minima
        while minima and minima[-1][1] >= offset:
            minima.pop()
        minima.append((observed_at, offset))
        while minima[0][0] <= observed_at - SPAN_MS:
            minima.popleft()


def applied_offset(estimate: int | None) -> int | None:
    """The offset the rules apply for an estimate: 0 for one less than CLOCK_OFF_MS behind."""
    return estimate if estimate is None or estimate < 0 or estimate >= CLOCK_OFF_MS else 0


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (over UTF-16 code units, 32-bit overflow)."""
    units = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def offsets_partition_of(group: str, partitions: int) -> int:
    """The offsets-topic partition of a group, whose leader is its coordinator: Kafka's abs(hashCode) % partitions
    (abs(MIN_VALUE) = 0)."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass(frozen=True, slots=True)
class CoordinatorClocks:
    """The offsets the ingest stored (`keys.commit_clock`): per offsets partition, and the topic's partition count
    that maps a group to its partition. Unknown (no fresh commit read from the partition, admin mode): 0, lagwatch's
    own clock."""

    partitions: int = 0
    offsets_ms: Mapping[int, int] = field(default_factory=dict)

    @classmethod
    def parse(cls, stored: Mapping[bytes | str, bytes | str]) -> CoordinatorClocks:
        """From the stored hash; a field that is not a number is ignored (the hash is lagwatch's own, but a hand
        edit must not fail every read)."""
        partitions, offsets = 0, {}
        for name, value in stored.items():
            name = name.decode() if isinstance(name, bytes) else name
            try:
                number = int(value)
                if name == PARTITIONS_FIELD:
                    partitions = number
                elif name.startswith(OFFSET_FIELD_PREFIX):
                    offsets[int(name.removeprefix(OFFSET_FIELD_PREFIX))] = number
            except ValueError:
                continue
        return cls(partitions, offsets)

    def of_group(self, group: str) -> int:
        """The offset the rules apply to the group's commit times (`applied_offset`)."""
        if self.partitions <= 0 or not self.offsets_ms:
            return 0
        return applied_offset(self.offsets_ms.get(offsets_partition_of(group, self.partitions), 0)) or 0

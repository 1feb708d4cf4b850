"""The types lagwatch's modules exchange: statuses, window entries and evaluation results.

Everything here is plain data with no I/O, so the services, the API and the Spark job can all share it.
Status numbers are Burrow's (they appear as values of the `burrow_kafka_consumer_status` metric).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, NamedTuple

# A cluster's name, as configured and as every record, key and file carries it: safe inside Redis keys and hash
# tags, and as a directory of the history's files
CLUSTER_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}\Z")
CLUSTER_NAME_RULE = "letters, digits, '.', '_', '-'"
# a partition's `lag_kind` where the offsets' lag is transaction markers or aborted records only (PartitionStatus)
MARKERS_ONLY_LAG = "transaction-markers"


class Status(IntEnum):
    """Burrow's status constants; partitions use OK..REWIND except ERR, groups NOTFOUND..ERR."""

    NOTFOUND = 0
    OK = 1
    WARN = 2
    ERR = 3
    STOP = 4
    STALL = 5
    REWIND = 6

    def as_group_status(self) -> Status:
        """A partition status as it counts for its group: STOP, STALL and REWIND are ERR."""
        return Status.ERR if self > Status.ERR else self


class OffsetEntry(NamedTuple):
    """One committed offset in a partition window (a tuple: a sweep builds a million of them).

    `order` is the position of the commit record in the offsets topic; entries are kept sorted by it.
    `first_order` is the order of the first commit merged into this entry by `min-distance` (the entry stands for
    every commit in [first_order, order], so a replayed commit in that range is recognised as a duplicate).
    """

    offset: int
    timestamp: int
    observed_at: int | None = None
    lag: int | None = None
    order: int = 0
    first_order: int = 0

    def covers(self, order: int) -> bool:
        return self.first_order <= order <= self.order

    def to_json(self) -> dict[str, Any]:
        return {"offset": self.offset, "timestamp": self.timestamp, "observedAt": self.observed_at, "lag": self.lag}


@dataclass(frozen=True, slots=True)
class PartitionInput:
    """What the rules need to know about one partition of a group."""

    topic: str
    partition: int
    offsets: tuple[OffsetEntry | None, ...]  # the ring, oldest first; None for empty slots
    broker_offsets: tuple[int, ...] = ()  # log-end offsets, oldest first
    current_lag: int = 0
    owner: str = ""
    client_id: str = ""
    # the log end up to which the log probe found only transaction markers or aborted records past the newest commit
    # (current_lag is 0 then); None where it did not (the offsets' lag stands)
    markers_end: int | None = None


@dataclass(frozen=True, slots=True)
class RuleConfig:
    """Evaluator options with Burrow's defaults."""

    allowed_lag: int = 0
    minimum_complete: float = 0.0
    # A window needs this many entries before STOP, STALL or WARN can be judged (rules.is_young); Burrow's is 1.
    minimum_entries: int = 3


@dataclass(frozen=True, slots=True)
class PartitionStatus:
    topic: str
    partition: int
    status: Status
    start: OffsetEntry | None
    end: OffsetEntry | None
    current_lag: int
    complete: float
    owner: str = ""
    client_id: str = ""
    markers_end: int | None = None  # as PartitionInput's

    def to_json(self) -> dict[str, Any]:
        """Burrow's partition object; where the log probe found the offsets' lag to be transaction markers only,
        lagwatch's `lag_kind` and `unread_records` too (Burrow's fields stay as they are)."""
        body = {
            "topic": self.topic,
            "partition": self.partition,
            "owner": self.owner,
            "client_id": self.client_id,
            "status": self.status.name,
            "start": self.start.to_json() if self.start else None,
            "end": self.end.to_json() if self.end else None,
            "current_lag": self.current_lag,
            "complete": self.complete,
        }
        if self.markers_end is not None:
            body |= {"lag_kind": MARKERS_ONLY_LAG, "unread_records": 0}
        return body


@dataclass(frozen=True, slots=True)
class GroupStatus:
    cluster: str
    group: str
    status: Status
    complete: float
    partitions: tuple[PartitionStatus, ...] = field(default_factory=tuple)
    maxlag: PartitionStatus | None = None
    totallag: int = 0

    @property
    def partition_count(self) -> int:
        return len(self.partitions)

    def to_json(self, *, only_bad_partitions: bool = False) -> dict[str, Any]:
        """Burrow's status object; `only_bad_partitions` gives the `/status` variant (partitions worse than OK)."""
        parts = [p for p in self.partitions if p.status != Status.OK] if only_bad_partitions else self.partitions
        return {
            "cluster": self.cluster,
            "group": self.group,
            "status": self.status.name,
            "complete": self.complete,
            "partitions": [p.to_json() for p in parts],
            "partition_count": self.partition_count,
            "maxlag": self.maxlag.to_json() if self.maxlag else None,
            "totallag": self.totallag,
        }


@dataclass(frozen=True, slots=True)
class WindowConfig:
    """Storage options with Burrow's defaults (intervals 10, min-distance 0 s, expire-group 7 days)."""

    intervals: int = 10
    min_distance_ms: int = 0
    expire_group_ms: int = 604_800_000
    lag_history_ms: int = 3_600_000  # log-end samples kept for lag in seconds
    lag_history_samples: int = 720


class Commit(NamedTuple):
    """One decoded offset commit, as the ingest hands it to a window (a tuple: built ~1M times a second)."""

    group: str
    topic: str
    partition: int
    offset: int
    timestamp: int  # commit timestamp from the record, ms
    order: int  # offset of the commit record in the offsets topic
    observed_at: int  # when lagwatch saw it, ms


class Sample(NamedTuple):
    offset: int  # log-end offset
    at: int  # when it was observed, epoch ms


class ProbedLog(NamedTuple):
    """What the log probe (services/ingest/log_probe.py) read past a committed offset: the offsets alone cannot
    tell transaction markers and aborted records, which no read_committed consumer receives, from unread records."""

    committed: int  # the offset read from
    log_end: int  # the high watermark then
    unread_from: int | None  # the first record a read_committed consumer would receive; None: none up to log_end
    unread_ms: int | None  # that record's timestamp (its age is the lag in seconds)
    probed_at: int  # lagwatch's clock, ms

    def caught_up_at(self, committed: int, log_end: int) -> bool:
        """Whether a consumer committed at `committed` has nothing to read up to `log_end`, by this answer: only
        while neither moved since the probe."""
        return self.unread_from is None and committed == self.committed and log_end == self.log_end

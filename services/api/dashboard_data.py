"""What the dashboard shows about a group, as JSON: a row of the overview from the evaluator's ready result
(results_store.py), its sparkline (the evaluator's points, ended with the lag now), and the detail of its partitions.

Ordering a cluster needs only each group's status and total lag, so `rank_results` and `Ranking` read just those from
the stored results and keep them (no result); only the groups shown are read again and decoded into rows
(`group_row`).
"""

from __future__ import annotations

import json
from array import array
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import TypeVar

from lagwatch.services.api.burrow_routes import consumer_topics
from lagwatch.shared.events.status_event import Incident
from lagwatch.shared.events.status_store import GroupState
from lagwatch.shared.protocol.types import Status
from lagwatch.shared.statuses.lag_sparkline import Point
from lagwatch.shared.statuses.results_store import GroupResult, decode_stored
from lagwatch.shared.statuses.time_lag import seconds_fields, worst
from lagwatch.shared.windows.stored_group import StoredGroup

TopicPartition = tuple[str, int]
Strays = dict[TopicPartition, list[tuple[int, int]]]  # partition -> (index in `Unranked`, newest offset)
GROUP_STATUSES = (Status.ERR, Status.WARN, Status.OK)
STATUSES = {s.value: s for s in Status}  # a stored status's number -> Status (a dict: `Status(n)` is slow)


def group_row(
    result: GroupResult,
    log_ends: Mapping[tuple[str, int], int],
    sparkline: Sequence[Point],
    now_ms: int,
    intervals: int,
    incident: Incident | None,
) -> dict:
    """One group of the overview; `incident` is the evaluator's open incident for it, if any."""
    lags = [p.lag(log_ends.get((p.topic, p.partition))) for p in result.partitions]
    totallag = sum(lags)
    top = max(zip(result.partitions, lags, strict=True), key=itemgetter(1), default=None)  # first of ties, as rules
    full = sum(1 for p in result.partitions if p.filled >= intervals)
    return {
        "group": result.group,
        "status": result.status.name,
        "complete": full / len(result.partitions) if result.partitions else 0.0,
        "partition_count": len(result.partitions),
        "totallag": totallag,
        "maxlag": {"topic": top[0].topic, "partition": top[0].partition, "current_lag": top[1]} if top else None,
        **seconds_fields(worst(p.time_lag(now_ms) for p in result.partitions), "max_lag_seconds"),
        "last_commit": result.last_commit_ms,
        "rebalances_last_hour": result.rebalances_last_hour(now_ms),
        "velocity": result.velocity_json(now_ms),
        "sparkline": [[at, lag] for at, lag in sparkline if at < now_ms] + [[now_ms, totallag]],
        "incident": incident_json(incident),
    }


def group_detail(status_json: dict, stored: StoredGroup, intervals: int) -> dict:
    """Burrow's status object (with lag in seconds) whose partitions also carry their window, oldest slot first:
    `[{offset, timestamp, observedAt, lag} | null, ...]` as in Burrow's consumer detail."""
    windows = consumer_topics(stored, {}, intervals)
    for part in status_json["partitions"]:
        part["window"] = windows[part["topic"]][part["partition"]]["offsets"]
    return status_json


def incident_json(incident: Incident | None) -> dict | None:
    if incident is None or incident.incident_id is None:
        return None
    return {"incident_id": incident.incident_id, "started_at": incident.started_at}


@dataclass(slots=True)
class Unranked:
    """Each readable result's group, status and total lag as read, before sorting: in arrays, not a tuple per group
    (a big cluster's ranking is kept for minutes, and a tuple and an int object per group were most of it)."""

    names: list[bytes] = field(default_factory=list)  # as read (decoded once sorted, see `Ranking.of`)
    statuses: array[int] = field(default_factory=lambda: array("b"))
    lags: array[int] = field(default_factory=lambda: array("q"))
    strays: Strays = field(default_factory=dict)


def rank_results(
    stored: Mapping[bytes, bytes | None],
    log_ends: Mapping[TopicPartition, int],
    topics: Mapping[str, int],
    into: Unranked | None = None,
) -> Unranked:
    """Each readable stored result's group, status and total lag, added to `into` (a cluster is read a slice at a
    time) unsorted. `log_ends` holds the log ends of the partitions of `topics` (name -> partition count); a
    partition past its topic's count (a topic recreated smaller) is kept as a stray, for `add_strays`. None of the
    results is kept: the groups shown are read again."""
    ranked = Unranked() if into is None else into
    for group, raw in stored.items():
        if raw is None:  # deleted since its name was read
            continue
        try:
            group.decode()  # a name that is not UTF-8 is unreadable too
            value = decode_stored(raw)
            status, lag, missing = STATUSES[value[0]], 0, []
            for p in value[3]:
                end, newest = log_ends.get((p[0], p[1])), p[3]
                if end is not None:
                    markers_only = len(p) > 7 and end == p[7]
                    lag += end - newest if end > newest >= 0 and not markers_only else 0  # PartitionResult.lag
                elif newest >= 0 and p[0] in topics and p[1] >= topics[p[0]]:  # a stray: read on its own
                    missing.append((p[0], p[1], newest))
        except (ValueError, TypeError, IndexError, KeyError):
            continue
        for topic, partition, newest in missing:
            ranked.strays.setdefault((topic, partition), []).append((len(ranked.names), newest))
        ranked.names.append(group)
        ranked.statuses.append(status)
        ranked.lags.append(min(lag, MAX_LAG))
    return ranked


MAX_LAG = (1 << 63) - 1  # what a total lag is counted up to (a 64-bit array holds it)


def add_strays(ranked: Unranked, log_ends: Mapping[TopicPartition, int]) -> None:
    """Add the lags of the stray partitions (`rank_results`) from their log ends, in place."""
    for tp, found in ranked.strays.items():
        end = log_ends.get(tp)
        for i, newest in found:
            if end is not None and end > newest:
                ranked.lags[i] = min(ranked.lags[i] + end - newest, MAX_LAG)


@dataclass(frozen=True, slots=True)
class Ranking:
    """A cluster's groups worst first (by status, then total lag, then name), and the totals the overview shows for
    all of them."""

    names: list[str]
    statuses: array[int]  # each group's status (its number), in the same order
    lags: array[int]  # each group's total lag, in the same order
    folded: list[str]  # the names casefolded (what `q` matches): the name itself where that changes nothing
    status_counts: dict[str, int]
    totallag: int

    @classmethod
    def of(cls, ranked: Unranked) -> Ranking:
        """Sorted and summed up. The order is three stable sorts of the positions on one plain key each rather
        than one on tuples: a sort holds the GIL (and so the event loop) throughout, and comparing tuples is far
        slower. Names sort as their UTF-8 bytes (the same order as their text) and are decoded here, all at once:
        decoded as they were read, each would have pinned memory among what the reading freed."""
        names, statuses, lags = ranked.names, ranked.statuses, ranked.lags
        order = sorted(range(len(names)), key=names.__getitem__)
        order.sort(key=lags.__getitem__, reverse=True)  # stable with reverse too: names stay in order
        order.sort(key=statuses.__getitem__, reverse=True)
        counts = Counter(statuses)
        sorted_names = [names[i].decode() for i in order]
        return cls(
            sorted_names,
            array("b", map(statuses.__getitem__, order)),
            array("q", map(lags.__getitem__, order)),
            [folded if (folded := name.casefold()) != name else name for name in sorted_names],
            {s.name: counts[s] for s in GROUP_STATUSES} | {Status(s).name: n for s, n in counts.items()},
            sum(lags),
        )

    def __len__(self) -> int:
        return len(self.names)

    def matching(self, q: str) -> Iterator[str]:
        """The names of the groups whose name holds `q` (case-insensitive), worst first; all of them for an
        empty `q`."""
        return named_like(q, self.names, self.folded)


Item = TypeVar("Item")


def named_like(q: str, items: Sequence[Item], folded: Sequence[str]) -> Iterator[Item]:
    """The items whose name (`folded`: their names casefolded) holds `q`, any case; all of them for an empty `q`."""
    if not q:
        return iter(items)
    wanted = q.casefold()
    return (item for item, name in zip(items, folded, strict=True) if wanted in name)


def sparkline_points(raw: bytes | None) -> list[Point]:
    """A stored sparkline (`ResultsStore.write`'s JSON `[[ms, lag], ...]`); [] when there is none or it is
    unreadable."""
    try:
        return [(int(at), int(lag)) for at, lag in json.loads(raw)] if raw else []
    except (ValueError, TypeError):
        return []


@dataclass(frozen=True, slots=True)
class OpenIncidents:
    """The open incidents as the overview lists them, and their groups' names casefolded."""

    rows: list[dict]
    folded: list[str]

    @classmethod
    def of(cls, ranking: Ranking, states: Mapping[str, GroupState]) -> OpenIncidents:
        """Worst first, then any group without a ready result, by name."""
        ordered = [g for g in ranking.names if g in states]
        ordered += sorted(set(states).difference(ordered))
        rows = [
            {"group": g, "status": states[g].status.name, **(incident_json(states[g].incident) or {})} for g in ordered
        ]
        return cls(rows, [g.casefold() for g in ordered])

    def matching(self, q: str) -> list[dict]:
        return list(named_like(q, self.rows, self.folded))

"""What the dashboard shows about a group, as JSON: a row of the overview from the evaluator's ready result
(results_store.py), its sparkline (the evaluator's points, ended with the lag now), and the detail of its partitions.

Ordering a cluster needs only each group's status and total lag, so `rank_results` and `Ranking` read just those from
the stored results and keep each result's bytes; only the groups shown are decoded into rows (`group_row`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
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
Ranked = tuple[int, int, str, bytes]  # -status, -total lag, group, its stored result: sorted, worst first
Strays = dict[TopicPartition, list[tuple[int, int]]]  # partition -> (index in the ranked list, newest offset)
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


def rank_results(
    stored: Mapping[bytes, bytes], log_ends: Mapping[TopicPartition, int], topics: Mapping[str, int]
) -> tuple[list[Ranked], Strays]:
    """Each readable stored result with its status and total lag, unsorted. `log_ends` holds the log ends of the
    partitions of `topics` (name -> partition count); a partition past its topic's count (a topic recreated smaller)
    is returned as a stray, for `add_strays`. Only a result's bytes are kept: 100k decoded results (millions of
    lists) make the garbage collector's passes slow."""
    groups: list[Ranked] = []
    strays: Strays = {}
    for group, raw in stored.items():
        try:
            name, value = group.decode(), decode_stored(raw)
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
            strays.setdefault((topic, partition), []).append((len(groups), newest))
        groups.append((-status, -lag, name, raw))
    return groups, strays


def add_strays(groups: list[Ranked], strays: Strays, log_ends: Mapping[TopicPartition, int]) -> None:
    """Add the lags of the stray partitions (`rank_results`) from their log ends, in place."""
    for tp, found in strays.items():
        end = log_ends.get(tp)
        for i, newest in found:
            if end is not None and end > newest:
                status, lag, group, raw = groups[i]
                groups[i] = (status, lag - (end - newest), group, raw)


@dataclass(frozen=True, slots=True)
class Ranking:
    """A cluster's groups worst first (by status, then total lag, then name), and the totals the overview shows for
    all of them."""

    groups: list[Ranked]
    folded: list[str]  # the groups' names casefolded, in the same order (what `q` matches)
    status_counts: dict[str, int]
    totallag: int

    @classmethod
    def of(cls, groups: list[Ranked]) -> Ranking:
        """Sorts `groups` (in place) and sums them up. Three stable sorts on one plain key each rather than one on
        the tuples: a sort holds the GIL (and so the event loop) throughout, and comparing tuples is far slower."""
        for field in (2, 1, 0):
            groups.sort(key=itemgetter(field))
        counts = Counter(-g[0] for g in groups)
        return cls(
            groups,
            [g[2].casefold() for g in groups],
            {s.name: counts[s] for s in GROUP_STATUSES} | {Status(s).name: n for s, n in counts.items()},
            -sum(g[1] for g in groups),
        )

    def matching(self, q: str) -> Iterator[Ranked]:
        """The groups whose name holds `q` (case-insensitive), worst first; all of them for an empty `q`."""
        return named_like(q, self.groups, self.folded)


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
        ordered = [g[2] for g in ranking.groups if g[2] in states]
        ordered += sorted(set(states).difference(ordered))
        rows = [
            {"group": g, "status": states[g].status.name, **(incident_json(states[g].incident) or {})} for g in ordered
        ]
        return cls(rows, [g.casefold() for g in ordered])

    def matching(self, q: str) -> list[dict]:
        return list(named_like(q, self.rows, self.folded))

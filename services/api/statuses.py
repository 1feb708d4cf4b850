"""Group statuses for the api: Burrow's rules applied to the windows in Redis at request time, as Burrow judges a
group when asked (right even while no evaluator runs). A group whose newest commit is older than `expire-group` is
NOTFOUND, as the evaluator treats it.
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING

from lagwatch.shared.protocol.types import GroupStatus, Status
from lagwatch.shared.runtime.config import Config
from lagwatch.shared.statuses import verdicts
from lagwatch.shared.statuses.explanation import explain
from lagwatch.shared.statuses.retention import group_risk
from lagwatch.shared.statuses.time_lag import seconds_fields, worst
from lagwatch.shared.statuses.velocity import group_velocity
from lagwatch.shared.windows.stored_group import StoredGroup

if TYPE_CHECKING:
    from lagwatch.services.api.context import ApiContext

THREAD_FROM_PARTITIONS = 1000  # a group this large is judged off the event loop (smaller: the hop costs more)


def evaluate(stored: StoredGroup, now_ms: int, config: Config) -> GroupStatus:
    return verdicts.stored_group_status(stored, config.storage.intervals, now_ms, config.rules())


def not_found(cluster: str, group: str) -> GroupStatus:
    """Burrow's answer for a group (or cluster) it does not know: NOTFOUND, no partitions, `complete` 1.0 (its
    evaluator's literal for this answer)."""
    return GroupStatus(cluster=cluster, group=group, status=Status.NOTFOUND, complete=1.0)


async def status_body(stored: StoredGroup, now_ms: int, context: ApiContext, *, only_bad_partitions: bool) -> dict:
    """The group's status object (`_body`). A group of thousands of partitions takes a lot of CPU: computed on a
    thread then, so other requests (the probes) are not kept waiting."""
    group = [stored.group] if stored.rebalances_last_hour else []  # its generations: only when it had any
    rebalances = (await context.store.reads.rebalance_times(stored.cluster, group, now_ms)).get(stored.group, ())
    compute = functools.partial(_body, stored, now_ms, context.config, tuple(rebalances), only_bad_partitions)
    if len(stored.partitions) >= THREAD_FROM_PARTITIONS:
        return await asyncio.to_thread(compute)
    return compute()


def _body(stored: StoredGroup, now_ms: int, config: Config, rebalances: tuple[int, ...], only_bad: bool) -> dict:
    """Burrow's status object, with lagwatch's fields beside (Burrow's stay as they are), per partition, in `maxlag`
    and for the group: lag in seconds (`current_lag_seconds` / `max_lag_seconds`), `velocity` (rates, lag growth,
    time to catch up), `retention` (risk), and the group's `explanation` (why, from its recent generations too)."""
    status = evaluate(stored, now_ms, config)
    body = status.to_json(only_bad_partitions=only_bad)
    lags = verdicts.time_lags(stored, now_ms)
    speeds = verdicts.velocities(stored, config.storage.intervals, now_ms)
    risks = verdicts.retention_risks(stored, now_ms)
    for part in [*body["partitions"], *([body["maxlag"]] if body.get("maxlag") else [])]:
        tp = (part["topic"], part["partition"])
        part.update(seconds_fields(lags.get(tp), "current_lag_seconds"))
        speed, risk = speeds.get(tp), risks.get(tp)
        part["velocity"] = speed.to_json() if speed is not None else None
        part["retention"] = risk.to_json() if risk is not None else None
    overall, retention = group_velocity(speeds.values()), group_risk(risks.values())
    body.update(seconds_fields(worst(lags.values()), "max_lag_seconds"))
    body["velocity"] = overall.to_json()
    body["retention"] = retention.to_json()
    known = stored.generation is not None
    why = explain(
        status, speeds, overall, rebalances, now_ms, known, retention=retention, clock_offset_ms=stored.clock_offset_ms
    )
    body["explanation"] = why.to_json()
    return body

"""Evaluating groups in a test, as the evaluator would (its ready results, schedule instants, statuses), without
Kafka: events go to a publisher that acknowledges everything."""

from __future__ import annotations

from lagwatch.services.evaluator.evaluation import EvaluationReport, GroupEvaluator
from lagwatch.shared.events.status_store import StatusStore
from lagwatch.shared.runtime.config import Config
from lagwatch.shared.windows.store import WindowStore


class AcceptingPublisher:
    """Kafka stand-in for tests that are not about publishing: every event counts as acknowledged."""

    def __init__(self) -> None:
        self.events: list[bytes] = []

    async def publish(self, items, topic=None):
        self.events.extend(event for _, _, event in items)
        return {event for _, _, event in items}


async def evaluate(redis, config: Config, cluster: str, groups, now_ms: int | None = None) -> EvaluationReport:
    store = WindowStore(redis, config.window())
    statuses = StatusStore(redis, config.window().expire_group_ms)
    evaluator = GroupEvaluator(cluster, store, statuses, AcceptingPublisher(), config.rules())
    return await evaluator.evaluate(sorted(groups), now_ms)

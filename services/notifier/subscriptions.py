"""Subscriptions as the notifier runs them: the configuration file's validated at start (as the api validates its
documents: shared/notifications/subscriptions/validation.py), each compiled (policy, coverage) and served with the
api's from a `Registry`. Log lines name a subscription by id and destination (scheme://host:port) only."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from lagwatch.shared.notifications.subscriptions.coverage import Coverage
from lagwatch.shared.notifications.subscriptions.documents import SOURCE_API, SOURCE_CONFIG
from lagwatch.shared.notifications.subscriptions.notification_policy import Policy
from lagwatch.shared.notifications.subscriptions.store import SubscriptionStore
from lagwatch.shared.notifications.subscriptions.validation import destination_of, file_problems
from lagwatch.shared.protocol.types import Status
from lagwatch.shared.runtime.config import Config, SubscriptionConfig
from lagwatch.shared.runtime.redis_client import connect

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Subscription:
    config: SubscriptionConfig
    source: str
    policy: Policy
    coverage: Coverage  # the clusters and groups it is about

    @property
    def id(self) -> str:
        return self.config.id

    @property
    def type(self) -> str:
        return self.config.type

    def matches(self, cluster: str, group: str) -> bool:
        return self.coverage.covers(cluster, group)

    @property
    def destination(self) -> str:
        return destination_of(self.config)


def compile_subscription(config: SubscriptionConfig, source: str) -> Subscription:
    """Compile the rules (templates are compiled where they are rendered: template_worker.py)."""
    return Subscription(
        config=config,
        source=source,
        policy=Policy(
            threshold=Status[config.threshold],
            send_close=config.send_close,
            send_once=config.send_once,
            send_interval_ms=int(config.send_interval * 1000),
            lag_threshold_s=config.lag_seconds_threshold,
            retention_risk_s=config.retention_risk_threshold,
            hold_for_ms=int(config.hold_for * 1000),
        ),
        coverage=Coverage.of(config),
    )


def from_config(config: Config) -> list[Subscription]:
    """The configuration file's subscriptions, validated: ConfigError names the first bad key."""
    for problem in file_problems(config):
        raise problem
    return [compile_subscription(sub, SOURCE_CONFIG) for sub in config.subscriptions]


# --- api documents ----------------------------------------------------------------------------------------------


class Registry:
    """Every subscription a notifier serves: the file's, plus the api's (reloaded when their version moves)."""

    def __init__(self, config: Config, store: SubscriptionStore) -> None:
        self.store = store
        self.from_file = {s.id: s for s in from_config(config)}
        self._api: dict[str, Subscription] = {}
        self.version: int | None = None  # of the api's subscriptions loaded (None before the first load)

    async def refresh(self, *, force: bool = False, version: int | None = None) -> None:
        """Reload the api's subscriptions when their version moved (`version`: already read by the caller)."""
        version = await self.store.version() if version is None else version
        if version == self.version and not force:
            return
        loaded: dict[str, Subscription] = {}
        for sub_id, config in (await self.store.all()).items():
            if sub_id in self.from_file:
                log.error("subscription %s from the api is shadowed by the configuration file's", sub_id)
                continue
            try:
                loaded[sub_id] = compile_subscription(config, SOURCE_API)
            except Exception as exc:  # one bad document (from an older version, say) must not stop the others
                log.error("subscription %s cannot be used: %s: %s", sub_id, type(exc).__name__, exc)
        self._api = loaded
        self.version = version

    def get(self, sub_id: str) -> Subscription | None:
        return self.from_file.get(sub_id) or self._api.get(sub_id)

    async def find(self, sub_id: str) -> Subscription | None:
        """`get`, the api's reloaded first when it does not know the id (one created since the last load)."""
        if self.get(sub_id) is None:
            await self.refresh(force=True)
        return self.get(sub_id)

    def all(self) -> list[Subscription]:
        return [*self.from_file.values(), *self._api.values()]

    def matching(self, cluster: str, group: str) -> list[Subscription]:
        return [s for s in self.all() if s.matches(cluster, group)]


class NoSuchSubscription(LookupError):
    pass


async def find_subscription(config: Config, subscription_id: str) -> Subscription:
    """The configuration file's subscription, else the api's (read from Redis); NoSuchSubscription naming the
    ones there are when neither has it."""
    redis = connect(config.redis)
    try:
        registry = Registry(config, SubscriptionStore(redis))
        if subscription_id not in registry.from_file:
            await registry.refresh()
    finally:
        await redis.aclose()
    subscription = registry.get(subscription_id)
    if subscription is None:
        known = ", ".join(sorted(s.id for s in registry.all())) or "none"
        raise NoSuchSubscription(f"no subscription {subscription_id!r} (there are: {known})")
    return subscription

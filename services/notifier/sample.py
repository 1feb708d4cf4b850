"""A sample incident sent now to one subscription (`lagwatch notify test ID`, docs/webhooks.md): its `open` and, with
`send-close`, its `close` for the group `lagwatch-test` (`lag`, `retention`: a lag or data-loss-risk alert's), built
by `build_request` and sent by the notifier's `Sender` but not through the outbox: nothing is kept, retried or
dead-lettered. Both carry `X-Lagwatch-Reason: test`, and their ids are new at every run.

The samples asked for through the api (shared/notifications/sample_requests.py) are taken by a running notifier
(`serve_samples`), from its start, while Kafka is still away too: a sample needs only Redis and the receiver."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from lagwatch.services.notifier.delivery import Sender
from lagwatch.services.notifier.messages import PermanentError, build_off_the_loop
from lagwatch.services.notifier.outbox import Delivery
from lagwatch.services.notifier.subscriptions import Registry, Subscription
from lagwatch.shared.events.lag_threshold_event import Alert, Crossing, LagThresholdEvent, Reason
from lagwatch.shared.events.lag_threshold_event import build_event as build_lag_event
from lagwatch.shared.events.status_event import Incident, StatusEvent, build_event, new_incident_id
from lagwatch.shared.notifications import sample_requests
from lagwatch.shared.notifications.sample_requests import LAG, STATUS, SampleRequest, missing_threshold
from lagwatch.shared.protocol.types import GroupStatus, OffsetEntry, PartitionStatus, Status
from lagwatch.shared.runtime import clock
from lagwatch.shared.runtime.config import Config, NotifierConfig
from lagwatch.shared.runtime.outage_log import OutageLog
from lagwatch.shared.runtime.service_lifecycle import pause
from lagwatch.shared.statuses.retention import RetentionRisk
from lagwatch.shared.statuses.time_lag import CAUGHT_UP, TimeLag

log = logging.getLogger(__name__)
AnyEvent = StatusEvent | LagThresholdEvent

SAMPLE_GROUP = "lagwatch-test"
SAMPLE_PARTITION = ("lagwatch-test", 0)  # its one partition (topic, partition)
TEST_REASON = "test"


class NoSuchAlerts(ValueError):
    """A lag or retention sample asked of a subscription without the threshold (`lag-seconds-threshold`,
    `retention-risk-threshold`): it gets no such alerts."""


@dataclass(frozen=True, slots=True)
class Sent:
    """One notification of the sample and what its receiver answered."""

    kind: str
    ok: bool
    status: int | None
    error: str | None


def sample_cluster(subscription: Subscription, configured: list[str]) -> str:
    """The cluster the sample names when none is asked for: one the subscription takes, else one configured."""
    return next(iter(subscription.config.clusters or sorted(configured)), "local")


def sample_statuses(cluster: str, now_ms: int) -> tuple[GroupStatus, GroupStatus]:
    """`lagwatch-test` on `cluster`: one partition 120 messages behind and not moving (WARN), then caught up (OK)."""
    start, end = OffsetEntry(880, now_ms - 60_000), OffsetEntry(880, now_ms)
    behind = PartitionStatus(*SAMPLE_PARTITION, Status.WARN, start, end, 120, 1.0, "/127.0.0.1", "lagwatch-test")
    warn = GroupStatus(cluster, SAMPLE_GROUP, Status.WARN, 1.0, (behind,), behind, 120)
    caught_up = dataclasses.replace(behind, status=Status.OK, current_lag=0, end=OffsetEntry(1000, now_ms))
    return warn, GroupStatus(cluster, SAMPLE_GROUP, Status.OK, 1.0, (caught_up,), caught_up, 0)


def sample_incident(cluster: str, now_ms: int) -> list[tuple[str, AnyEvent]]:
    """The open and the close of an incident of `lagwatch-test` on `cluster` (`sample_statuses`). A new incident id
    at each instant."""
    incident = Incident(new_incident_id(cluster, SAMPLE_GROUP, now_ms), now_ms)
    warn, ok = sample_statuses(cluster, now_ms)
    common: dict[str, Any] = {"cluster": cluster, "group": SAMPLE_GROUP, "incident": incident, "evaluated_at": now_ms}
    opened = build_event(seq=1, previous=Status.OK, group_status=warn, **common)
    return [("open", opened), ("close", build_event(seq=2, previous=Status.WARN, group_status=ok, **common))]


def sample_alert(cluster: str, now_ms: int, sample: str, threshold_s: float) -> list[tuple[str, AnyEvent]]:
    """The lag-open and lag-close of a threshold alert of `lagwatch-test`: 1.5 times the threshold behind (`lag`), or
    deleted unread in half of it (`retention`); then not. Ids from the crossing's number, `now_ms`: new each time."""
    if sample == LAG:
        over = Crossing(threshold_s, above=True)
        at_open: dict[str, Any] = {"time_lags": {SAMPLE_PARTITION: TimeLag(threshold_s * 1.5)}}
        at_close: dict[str, Any] = {"time_lags": {SAMPLE_PARTITION: CAUGHT_UP}}
    else:
        over = Crossing(threshold_s, above=True, reason=Reason.RETENTION, alert=Alert.DATA_LOSS_RISK)
        at_open = {"retention": {SAMPLE_PARTITION: RetentionRisk(threshold_s / 2, basis="retention.ms")}}
        at_close = {"retention": {}}
    warn, ok = sample_statuses(cluster, now_ms)
    common: dict[str, Any] = {"cluster": cluster, "group": SAMPLE_GROUP, "incident_started_at": now_ms,
                              "evaluated_at": now_ms, "time_lags": {}}  # fmt: skip
    opened = build_lag_event(crossing=over, seq=now_ms, group_status=warn, **{**common, **at_open})
    under = dataclasses.replace(over, above=False)
    closed = build_lag_event(crossing=under, seq=now_ms + 1, group_status=ok, **{**common, **at_close})
    return [("lag-open", opened), ("lag-close", closed)]


async def sample_report(
    subscription: Subscription,
    settings: NotifierConfig,
    cluster: str | None,
    configured: list[str],
    now_ms: int,
    sample: str = STATUS,
    sender: Sender | None = None,
) -> dict[str, Any]:
    """Send the sample (to `cluster`, else one the subscription covers): the report `lagwatch notify test` prints
    and `POST /api/v1/subscriptions/{id}/test` answers. NoSuchAlerts."""
    cluster = cluster or sample_cluster(subscription, configured)
    return report_of(subscription, cluster, await send_sample(subscription, settings, cluster, now_ms, sample, sender))


def report_of(subscription: Subscription, cluster: str, sent: list[Sent]) -> dict[str, Any]:
    """The sample's report: whom it went to and what each receiver answered."""
    return {
        "subscription": subscription.id,
        "type": subscription.type,
        "cluster": cluster,
        "group": SAMPLE_GROUP,
        "sent": [{"kind": s.kind, "ok": s.ok, "status": s.status, "error": s.error} for s in sent],
    }


async def send_sample(
    subscription: Subscription,
    settings: NotifierConfig,
    cluster: str,
    now_ms: int,
    sample: str = STATUS,
    sender: Sender | None = None,
) -> list[Sent]:
    """Send the sample's open, then (with `send-close`, and once the open was taken) its close, with `sender` (else
    one of its own, stopped after). NoSuchAlerts."""
    kinds = _notifications(subscription, cluster, now_ms, sample)
    if not subscription.policy.send_close:
        kinds = kinds[:1]
    own = sender is None
    if sender is None:
        sender = Sender(timeout_s=settings.request_timeout, allow_private=settings.allow_private_targets)
        await sender.start()
    sent: list[Sent] = []
    try:
        for kind, event in kinds:
            sent.append(await _send_one(sender, subscription, settings, kind, event, now_ms))
            if not sent[-1].ok:
                break
    finally:
        if own:
            await sender.stop()
    return sent


def _notifications(subscription: Subscription, cluster: str, now_ms: int, sample: str) -> list[tuple[str, AnyEvent]]:
    policy = subscription.policy
    if lacking := missing_threshold(sample, policy.lag_threshold_s, policy.retention_risk_s):
        raise NoSuchAlerts(f"subscription {subscription.id!r} {lacking}")
    if sample == STATUS:
        return sample_incident(cluster, now_ms)
    return sample_alert(cluster, now_ms, sample, policy.lag_threshold_s if sample == LAG else policy.retention_risk_s)


async def _send_one(
    sender: Sender, subscription: Subscription, settings: NotifierConfig, kind: str, event: AnyEvent, now_ms: int
) -> Sent:
    delivery = Delivery(
        id=uuid.uuid4().hex,
        subscription_id=subscription.id,
        kind=kind,
        event=event,
        notification_id=uuid.uuid4().hex,
        created_at=now_ms,
        attempts=1,
        reason=TEST_REASON,
    )
    options = {"dashboard_url": settings.dashboard_url, "allow_private": settings.allow_private_targets}
    try:
        request = await build_off_the_loop(subscription, delivery, **options)
    except PermanentError as exc:
        return Sent(kind, False, None, str(exc))
    result = await sender.send(request)
    return Sent(kind, result.ok, result.status, result.error)


async def serve_samples(
    redis: Redis, registry: Registry, config: Config, sender: Sender, stopping: asyncio.Event
) -> None:
    """Until `stopping`: take the requests queued, one at a time, every TAKE_EVERY_S, and send them with the
    notifier's `sender`."""
    outage = OutageLog(log, "notifier: cannot take sample requests")
    while not stopping.is_set():
        try:
            while not stopping.is_set() and (request := await sample_requests.take(redis)) is not None:
                await sample_requests.report(redis, request.id, await _answer(request, registry, config, sender))
            outage.ok()
        except RedisError as exc:
            outage.failed(exc)
        await pause(stopping, sample_requests.TAKE_EVERY_S)


async def _answer(request: SampleRequest, registry: Registry, config: Config, sender: Sender) -> dict[str, Any]:
    subscription = await registry.find(request.subscription)
    if subscription is None:
        return {"subscription": request.subscription, "error": "the notifier has no such subscription"}
    log.info("notifier: sending a sample incident to subscription %s (asked through the api)", subscription.id)
    clusters = list(config.clusters)
    try:
        return await sample_report(
            subscription, config.notifier, request.cluster, clusters, clock.now_ms(), request.sample, sender
        )
    except NoSuchAlerts as exc:
        return {"subscription": request.subscription, "error": str(exc)}
    except Exception as exc:  # said to the caller as the receiver's failure; the loop goes on with the next request
        log.exception("notifier: the sample for subscription %s failed", subscription.id)
        failed = Sent("open", False, None, f"{type(exc).__name__}: {exc}")
        return report_of(subscription, request.cluster or sample_cluster(subscription, clusters), [failed])

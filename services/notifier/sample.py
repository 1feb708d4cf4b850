"""A sample incident sent now to one subscription (`lagwatch notify test ID`): does its receiver take lagwatch's
notifications — the address, the TLS, the login, the signature, the templates — before a real incident needs it?
(Grafana tests a contact point, PagerDuty sends a test event; Burrow has no such thing.)

The subscription gets what it would get for an incident of the group `lagwatch-test`: an `open` (WARN, one partition
behind) and, with `send-close`, its `close` (OK), built by the notifier's own `build_request` and sent by its own
`Sender` (the address guard, `allow-private-targets`, the subscription's timeout and CA) — not through the outbox:
nothing is kept, retried or dead-lettered, and each answer is said at once. Both carry `X-Lagwatch-Reason: test`
(`notification.reason` in templates) so that a receiver acting on alerts can tell; their ids are new at every run
(a receiver deduplicating on `X-Lagwatch-Event-Id` or the incident takes a second test too).
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from typing import Any

from lagwatch.services.notifier.delivery import Sender
from lagwatch.services.notifier.messages import PermanentError, build_request
from lagwatch.services.notifier.outbox import Delivery
from lagwatch.services.notifier.subscriptions import Subscription
from lagwatch.shared.config import NotifierConfig
from lagwatch.shared.domain.protocol import GroupStatus, OffsetEntry, PartitionStatus, Status
from lagwatch.shared.domain.status_event import Incident, StatusEvent, build_event, new_incident_id

SAMPLE_GROUP = "lagwatch-test"
TEST_REASON = "test"


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


def sample_incident(cluster: str, now_ms: int) -> tuple[StatusEvent, StatusEvent]:
    """(the open, the close) of an incident of `lagwatch-test` on `cluster`: one partition 120 messages behind
    and not moving (WARN), then caught up (OK). A new incident id at each instant."""
    incident = Incident(new_incident_id(cluster, SAMPLE_GROUP, now_ms), now_ms)
    start, end = OffsetEntry(880, now_ms - 60_000), OffsetEntry(880, now_ms)
    behind = PartitionStatus("lagwatch-test", 0, Status.WARN, start, end, 120, 1.0, "/127.0.0.1", "lagwatch-test")
    warn = GroupStatus(cluster, SAMPLE_GROUP, Status.WARN, 1.0, (behind,), behind, 120)
    caught_up = dataclasses.replace(behind, status=Status.OK, current_lag=0, end=OffsetEntry(1000, now_ms))
    ok = GroupStatus(cluster, SAMPLE_GROUP, Status.OK, 1.0, (caught_up,), caught_up, 0)
    opened = build_event(
        cluster=cluster, group=SAMPLE_GROUP, seq=1, previous=Status.OK, group_status=warn, incident=incident,
        evaluated_at=now_ms,
    )  # fmt: skip
    closed = build_event(
        cluster=cluster, group=SAMPLE_GROUP, seq=2, previous=Status.WARN, group_status=ok, incident=incident,
        evaluated_at=now_ms,
    )  # fmt: skip
    return opened, closed


async def sample_report(
    subscription: Subscription, settings: NotifierConfig, cluster: str | None, configured: list[str], now_ms: int
) -> dict[str, Any]:
    """Send the sample (to `cluster`, else one the subscription covers) and say what each receiver answered: the
    report `lagwatch notify test` prints and `POST /api/v1/subscriptions/{id}/test` answers."""
    cluster = cluster or sample_cluster(subscription, configured)
    sent = await send_sample(subscription, settings, cluster, now_ms)
    return {
        "subscription": subscription.id,
        "type": subscription.type,
        "cluster": cluster,
        "group": SAMPLE_GROUP,
        "sent": [{"kind": s.kind, "ok": s.ok, "status": s.status, "error": s.error} for s in sent],
    }


async def send_sample(subscription: Subscription, settings: NotifierConfig, cluster: str, now_ms: int) -> list[Sent]:
    """Send the sample's open, then (with `send-close`, and once the open was taken) its close."""
    opened, closed = sample_incident(cluster, now_ms)
    kinds = [("open", opened), ("close", closed)] if subscription.policy.send_close else [("open", opened)]
    sender = Sender(timeout_s=settings.request_timeout, allow_private=settings.allow_private_targets)
    await sender.start()
    sent: list[Sent] = []
    try:
        for kind, event in kinds:
            sent.append(await _send_one(sender, subscription, settings, kind, event, now_ms))
            if not sent[-1].ok:
                break
    finally:
        await sender.stop()
    return sent


async def _send_one(
    sender: Sender, subscription: Subscription, settings: NotifierConfig, kind: str, event: StatusEvent, now_ms: int
) -> Sent:
    delivery = Delivery(
        id=uuid.uuid4().hex,
        subscription_id=subscription.id,
        kind=kind,
        event=event.as_dict(),
        notification_id=uuid.uuid4().hex,
        created_at=now_ms,
        attempts=1,
        reason=TEST_REASON,
    )
    try:
        request = build_request(
            subscription, delivery, dashboard_url=settings.dashboard_url, allow_private=settings.allow_private_targets
        )
    except PermanentError as exc:
        return Sent(kind, False, None, str(exc))
    result = await sender.send(request)
    return Sent(kind, result.ok, result.status, result.error)

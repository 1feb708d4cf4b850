"""A cluster forgotten (`lagwatch forget-cluster`, shared/runtime/cluster_forgetting.py): its evaluator runs no more, so
nothing else would end its incidents. The notifiers close each one announced, once, with the reason
`cluster_forgotten`, and stop repeating it; other clusters' incidents go on; a late event of the forgotten cluster
opens nothing, while one of a cluster configured again after its forgetting does."""

import asyncio
import dataclasses

from lagwatch.services.notifier.events import LAG_EVENTS, STATUS_EVENTS
from lagwatch.services.notifier.outbox import now_ms
from lagwatch.services.notifier.service import NotifierService
from lagwatch.shared.events.lag_threshold_event import Alert, Crossing, Reason, build_event
from lagwatch.shared.events.status_event import encode
from lagwatch.shared.notifications.subscriptions.store import SubscriptionStore
from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import Status
from lagwatch.shared.runtime import cluster_forgetting
from lagwatch.shared.runtime.config import SubscriptionConfig
from lagwatch.shared.statuses.time_lag import TimeLag
from tests.kafka_helpers import eventually, make_config, running
from tests.services.notifier.test_notifier_scope import _deliveries, told
from tests.services.notifier.test_notifier_service import FAST, publish
from tests.services.notifier.test_notifier_support import Receiver, Timeline, group_status


async def test_a_forgotten_clusters_incidents_are_closed_once_and_no_longer_repeated(kafka, redis_server, redis):
    kafka.create_topic("lagwatch.status", 1)
    store = SubscriptionStore(redis)
    async with Receiver() as receiver:
        await store.put(SubscriptionConfig(id="hook", url=receiver.url("/hook"), send_interval=0.3), create=True)
        old = Timeline("billing", cluster="old", start_ms=now_ms() - 600_000)  # (a Timeline steps a minute an event)
        kept = Timeline("orders")
        config = make_config(kafka.bootstrap, redis_server.url, **FAST)
        async with running(NotifierService(config, "local", http_port=0)):
            await publish(kafka.bootstrap, old.to("OK"), old.to("ERR", (90,)), kept.to("WARN", (9,)))
            await eventually(lambda: _opened(receiver, 2))
            assert await redis.hexists(keys.NOTIFY_ACTIVE, "old/billing")
            await cluster_forgetting.forget(redis, "old", now_ms())
            await eventually(lambda: _closed(receiver, "billing"))
            await asyncio.sleep(1.0)  # repeats go on for orders only
    billing = told(receiver, "billing")
    assert billing[0] == ("open", "ERR", None)
    assert billing[-1] == ("close", "ERR", "cluster_forgotten")  # its latest event: the group was still ERR
    assert [kind for kind, _, _ in billing].count("close") == 1  # once, and nothing after it
    assert [kind for kind, _, _ in told(receiver, "orders")].count("repeat") >= 2
    assert await redis.hkeys(keys.notify_state("hook")) == [b"local/orders"]
    assert not await redis.hexists(keys.NOTIFY_ACTIVE, "old/billing")
    when, closed = await cluster_forgetting.forgotten(redis)
    assert list(when) == ["old"] and closed == when  # done: later starts need not look again


async def _opened(receiver, n: int) -> bool:
    return sum(r.headers["X-Lagwatch-Notification"] == "open" for r in receiver.requests) >= n


async def _closed(receiver, group: str) -> bool:
    return any(kind == "close" for kind, _, _ in told(receiver, group))


def lag_crossing(cluster: str, seq: int, above: bool, evaluated_at: int) -> bytes:
    """A lag-seconds crossing of 600 s, as the evaluator publishes it."""
    return build_event(
        cluster=cluster,
        group="billing",
        crossing=Crossing(600.0, above, Reason.LAG, Alert.LAG_SECONDS),
        seq=seq,
        incident_started_at=evaluated_at,
        evaluated_at=evaluated_at,
        group_status=group_status(cluster, "billing", Status.OK, (40,)),
        time_lags={("orders", 0): TimeLag(700.0)},
    ).encode()


async def test_a_lag_alert_of_a_forgotten_cluster_closes_as_the_group_gone_and_a_late_event_opens_nothing(
    kafka, redis_server, redis
):
    store = SubscriptionStore(redis)
    await store.put(SubscriptionConfig(id="pager", url="http://127.0.0.1:9/", lag_seconds_threshold=600), create=True)
    service = NotifierService(make_config(kafka.bootstrap, redis_server.url, **FAST), "local", http_port=0)
    start = now_ms() - 600_000
    try:
        assert await service.handle(lag_crossing("old", 1, True, start), LAG_EVENTS)
        forgotten_at = now_ms()
        await cluster_forgetting.forget(redis, "old", forgotten_at)
        await service.repeat_once()
        await service.repeat_once()  # nothing more
        closes = [(d.kind, d.reason, d.event.reason) for d in await _deliveries(redis) if d.kind == "lag-close"]
        assert closes == [("lag-close", "cluster_forgotten", "group_gone")]
        assert await redis.hget(keys.FORGOTTEN_CLOSED, "old") == str(forgotten_at).encode()

        late = Timeline("orders", cluster="old", start_ms=start)  # evaluated before the forgetting, read after it
        late.to("OK")
        assert await service.handle(encode(late.to("ERR", (90,))), STATUS_EVENTS)
        assert await redis.hlen(keys.notify_state("pager")) == 0 and not await redis.hexists(
            keys.NOTIFY_ACTIVE, "old/orders"
        )

        again = Timeline("orders", cluster="old", start_ms=forgotten_at)  # the cluster configured again since
        again.to("OK")
        assert await service.handle(encode(again.to("ERR", (90,))), STATUS_EVENTS)
        assert await redis.hkeys(keys.notify_state("pager")) == [b"old/orders"]
        await service.repeat_once()
        assert await redis.hkeys(keys.notify_state("pager")) == [b"old/orders"]  # not closed: after the forgetting
    finally:
        await service.redis.aclose()


async def test_a_notifier_starting_after_the_close_does_not_look_again(kafka, redis_server, redis):
    """The closes are recorded (`keys.FORGOTTEN_CLOSED`): a later start finds the forgetting done and reads no
    subscription's incidents for it (at 10k incidents that look takes seconds)."""
    config = make_config(kafka.bootstrap, redis_server.url, **FAST)
    hook = SubscriptionConfig(id="hook", url="http://127.0.0.1:9/")
    config = dataclasses.replace(config, subscriptions=[hook])
    await cluster_forgetting.forget(redis, "old", now_ms())
    await cluster_forgetting.record_closed(redis, "old", (await cluster_forgetting.forgotten(redis))[0]["old"])
    service = NotifierService(config, "local", http_port=0)
    looked, close_out_of_scope = [], service.scopes.close_out_of_scope

    async def recording(now, subscriptions=None):
        looked.append(subscriptions)
        return await close_out_of_scope(now, subscriptions)

    service.scopes.close_out_of_scope = recording
    try:
        await service.repeat_once()
    finally:
        await service.redis.aclose()
    assert looked and None not in looked  # the start's scope look only (its changed subscriptions), none for "old"

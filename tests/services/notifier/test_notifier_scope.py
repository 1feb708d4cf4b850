"""Incidents a subscription no longer covers (services/notifier/scope.py): narrowing a subscription's filters, or
turning off the threshold an announced lag alert was for, closes what it was told about, once, with the reason;
repeats of it stop; what it still covers goes on as before."""

import asyncio
import dataclasses
import json

from lagwatch.services.notifier.events import LAG_EVENTS, STATUS_EVENTS
from lagwatch.services.notifier.outbox import Delivery, now_ms
from lagwatch.services.notifier.service import NotifierService
from lagwatch.shared.events.lag_threshold_event import Alert, event_id
from lagwatch.shared.events.status_event import encode
from lagwatch.shared.notifications.subscriptions.store import SubscriptionStore
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.config import SubscriptionConfig
from tests.kafka_helpers import eventually, make_config, running
from tests.services.notifier.test_notifier_service import FAST, _crossing, publish
from tests.services.notifier.test_notifier_support import Receiver, Timeline, handled

STATUS_TOPIC = "lagwatch.status"


def told(receiver, group):
    """(kind, status in the body, reason header) of each request about `group`."""
    return [
        (r.headers["X-Lagwatch-Notification"], r.json()["status"], r.headers.get("X-Lagwatch-Reason"))
        for r in receiver.requests
        if r.path == "/hook" and r.json()["group"] == group
    ]


async def evaluator_records(redis, group: str, status: str | None = None, lag_crossings: int | None = None):
    """What the evaluator keeps of a group (keys.py), which an announcement checks the kept event against: its
    current status, and the crossings of its 600 s lag threshold so far (odd: over it)."""
    if status is not None:
        await redis.hset(keys.statuses_index("local"), group, status)
    if lag_crossings is not None:
        await redis.hset(keys.group_lag_thresholds("local", group), "600", f"{lag_crossings}:1700000000000")


async def _deliveries(redis) -> list[Delivery]:
    return [Delivery.from_json(raw) for raw in (await redis.hgetall(keys.OUTBOX_DELIVERIES)).values()]


async def test_a_narrowed_subscription_closes_what_it_no_longer_covers_and_stops_repeating_it(
    kafka, redis_server, redis
):
    kafka.create_topic(STATUS_TOPIC, 1)
    store = SubscriptionStore(redis)
    hook = SubscriptionConfig(id="hook", send_interval=0.3)
    async with Receiver() as receiver:
        await store.put(dataclasses.replace(hook, url=receiver.url("/hook")), create=True)
        await store.put(SubscriptionConfig(id="slack", type="slack", url=receiver.url("/slack")), create=True)
        billing, orders = Timeline("billing"), Timeline("orders")
        config = make_config(kafka.bootstrap, redis_server.url, **FAST)
        async with running(NotifierService(config, "local", http_port=0)):
            await publish(kafka.bootstrap, billing.to("OK"), billing.to("ERR", (90,)), orders.to("WARN", (9,)))
            await eventually(lambda: _has(receiver, "/slack", 2))
            opened = next(r for r in receiver.requests if r.path == "/hook" and r.json()["group"] == "billing")
            await store.put(
                dataclasses.replace(hook, url=receiver.url("/hook"), group_denylist="^billing$"), create=False
            )
            await store.put(
                SubscriptionConfig(id="slack", type="slack", url=receiver.url("/slack"), clusters=["prod"]),
                create=False,
            )
            await eventually(lambda: _has(receiver, "/slack", 4))  # both of slack's incidents: other cluster now
            await asyncio.sleep(1.0)  # repeats go on for orders only
            await publish(kafka.bootstrap, billing.to("OK"))  # not the subscription's any more: nothing
            await asyncio.sleep(0.5)
    billing_told = told(receiver, "billing")
    assert billing_told[0] == ("open", "ERR", None)
    assert billing_told[-1] == ("close", "ERR", "unsubscribed")  # the latest event: the group is still ERR
    assert [k for k, _, _ in billing_told].count("close") == 1
    assert billing_told.index(("close", "ERR", "unsubscribed")) == len(billing_told) - 1  # no repeat after it
    assert [k for k, _, _ in told(receiver, "orders")].count("repeat") >= 3  # still covered, still repeated
    (close,) = [r for r in receiver.requests if r.headers.get("X-Lagwatch-Reason") and r.path == "/hook"]
    assert close.headers["X-Lagwatch-Event-Id"] != opened.headers["X-Lagwatch-Event-Id"]  # news, not a duplicate
    slack = [r.json()["blocks"][0]["text"]["text"] for r in receiver.requests if r.path == "/slack"]
    assert sorted(slack[2:]) == [
        f":no_bell: No longer watched here: {g} on local (this subscription no longer covers it)"
        for g in ("billing", "orders")
    ]
    assert await redis.hlen(keys.notify_state("slack")) == 0
    assert await redis.hkeys(keys.notify_state("hook")) == [b"local/orders"]


async def _has(receiver, path, n):
    return sum(r.path == path for r in receiver.requests) >= n


async def test_a_lag_alert_whose_threshold_is_turned_off_is_closed_as_the_evaluator_would(kafka, redis_server, redis):
    store = SubscriptionStore(redis)
    await store.put(SubscriptionConfig(id="pager", url="http://127.0.0.1:9/", lag_seconds_threshold=600), create=True)
    service = NotifierService(make_config(kafka.bootstrap, redis_server.url, **FAST), "local", http_port=0)
    try:
        assert await service.handle(_crossing("billing", Alert.LAG_SECONDS, 600.0, 1, True), LAG_EVENTS)
        await store.put(SubscriptionConfig(id="pager", url="http://127.0.0.1:9/"), create=False)  # threshold off
        await service.repeat_once()
        await service.repeat_once()  # nothing more
    finally:
        await service.redis.aclose()
    kinds = sorted((d.kind, d.reason, getattr(d.event, "reason", None)) for d in await _deliveries(redis))
    assert kinds == [("lag-close", None, "threshold_removed"), ("lag-open", None, "lag")]
    (close,) = [d for d in await _deliveries(redis) if d.kind == "lag-close"]
    assert close.event.event_id == event_id("local", "billing", 600.0, 2, Alert.LAG_SECONDS)  # the evaluator's
    assert close.notification_id != close.event.event_id  # its own id: the evaluator's close may yet be news
    assert await redis.hlen(keys.notify_state("pager")) == 0


async def test_the_configuration_files_narrowed_filters_close_at_start_up_and_a_held_open_is_dropped(
    kafka, redis_server, redis
):
    """The file's subscriptions change across a restart: the first repeat tick looks. A held open (`hold-for`) of
    a group no longer covered was never announced, so it is dropped unsent."""
    wide = SubscriptionConfig(id="hook", url="http://127.0.0.1:9/")
    held = SubscriptionConfig(id="held", url="http://127.0.0.1:9/", hold_for=3600)
    config = make_config(kafka.bootstrap, redis_server.url, **FAST)
    t = Timeline("billing")
    t.to("OK")
    opened = encode(t.to("ERR", (90,)))
    first = NotifierService(dataclasses.replace(config, subscriptions=[wide, held]), "local", http_port=0)
    try:
        assert await first.handle(opened, STATUS_EVENTS)
    finally:
        await first.redis.aclose()
    assert await redis.hlen(keys.notify_state("held")) == 1
    narrowed = [dataclasses.replace(s, group_allowlist="^orders$") for s in (wide, held)]
    second = NotifierService(dataclasses.replace(config, subscriptions=narrowed), "local", http_port=0)
    try:
        await second.repeat_once()
    finally:
        await second.redis.aclose()
    sent = sorted((d.subscription_id, d.kind, d.reason) for d in await _deliveries(redis))
    assert sent == [("hook", "close", "unsubscribed"), ("hook", "open", None)]
    assert await redis.hlen(keys.notify_state("held")) == 0 and await redis.zcard(keys.NOTIFY_REPEATS) == 0


async def test_notifiers_that_find_the_same_incident_at_once_close_it_once(kafka, redis_server, redis):
    store = SubscriptionStore(redis)
    sub = SubscriptionConfig(id="hook", url="http://127.0.0.1:9/")
    await store.put(sub, create=True)
    config = make_config(kafka.bootstrap, redis_server.url, **FAST)
    services = [NotifierService(config, "local", http_port=0) for _ in range(3)]
    try:
        for i in range(20):
            t = Timeline(f"group-{i}")
            t.to("OK")
            assert await services[0].handle(encode(t.to("WARN", (9,))), STATUS_EVENTS)
        await store.put(dataclasses.replace(sub, group_denylist="^group-1"), create=False)  # 11 of the 20
        for service in services:
            await service.registry.refresh()
        closed = await asyncio.gather(*(s.scopes.close_out_of_scope(now_ms()) for s in services))
    finally:
        for service in services:
            await service.redis.aclose()
    closes = [d for d in await _deliveries(redis) if d.kind == "close"]
    assert sum(closed) == len(closes) == 11
    assert len({d.event.group for d in closes}) == 11
    assert all(json.loads(d.to_json())["reason"] == "unsubscribed" for d in closes)


async def test_a_subscription_created_or_widened_during_an_incident_is_told_of_it(kafka, redis_server, redis):
    """No event would tell it until the group changes, which for a stopped consumer may be never: the latest event
    of each incident going on is decided for it as if it had just arrived (Burrow's notifier looks at every group)."""
    kafka.create_topic(STATUS_TOPIC, 1)
    store = SubscriptionStore(redis)
    billing, orders, payments = Timeline("billing"), Timeline("orders"), Timeline("payments")
    async with Receiver() as receiver:
        late = SubscriptionConfig(id="late", url=receiver.url("/hook"), threshold="ERR")
        config = make_config(kafka.bootstrap, redis_server.url, **FAST)
        async with running(NotifierService(config, "local", http_port=0)) as service:
            known = billing.to("OK")
            burning = billing.to("ERR", (90,))
            await publish(kafka.bootstrap, known, burning, orders.to("WARN", (9,)))
            await publish(kafka.bootstrap, payments.to("ERR", (5,)), payments.to("OK"))
            await eventually(lambda: handled(service, 5))
            for group, status in (("billing", "ERR"), ("orders", "WARN"), ("payments", "OK")):
                await evaluator_records(redis, group, status)
            await store.put(late, create=True)  # billing is ERR; orders only WARN; payments is over
            await eventually(lambda: _has(receiver, "/hook", 1))
            await publish(kafka.bootstrap, billing.to("OK"))  # the announced incident ends as any other
            await eventually(lambda: _has(receiver, "/hook", 2))
            await publish(kafka.bootstrap, billing.to("ERR", (70,)))
            await eventually(lambda: _has(receiver, "/hook", 3))
            await store.put(dataclasses.replace(late, group_denylist="^billing$"), create=False)
            await eventually(lambda: _has(receiver, "/hook", 4))
            await store.put(late, create=False)  # widened again while billing is still ERR: told anew
            await eventually(lambda: _has(receiver, "/hook", 5))
            await asyncio.sleep(0.5)
    assert told(receiver, "billing") == [
        ("open", "ERR", None),
        ("close", "OK", None),
        ("open", "ERR", None),
        ("close", "ERR", "unsubscribed"),
        ("open", "ERR", None),
    ]
    ids = [r.headers["X-Lagwatch-Event-Id"] for r in receiver.requests]
    assert ids[0] != burning["event_id"] and len(set(ids)) == 5  # each news, none a duplicate of another
    assert receiver.requests[0].json()["event_id"] == burning["event_id"]  # the body: the event itself


async def test_a_lag_alert_going_on_is_announced_to_a_new_subscription_with_its_threshold_only(
    kafka, redis_server, redis
):
    """The evaluator publishes no new crossing for a threshold another subscription already used: the group is
    over it already. A new subscription asking for that threshold is told; one asking for another is not, and one
    with `hold-for` holds it as it would hold the event."""
    store = SubscriptionStore(redis)
    await store.put(SubscriptionConfig(id="first", url="http://127.0.0.1:9/", lag_seconds_threshold=600), create=True)
    service = NotifierService(make_config(kafka.bootstrap, redis_server.url, **FAST), "local", http_port=0)
    try:
        await service.repeat_once()
        assert await service.handle(_crossing("billing", Alert.LAG_SECONDS, 600.0, 1, True), LAG_EVENTS)
        await evaluator_records(redis, "billing", "OK", lag_crossings=1)
        remote = Timeline("remote", cluster="elsewhere")  # another cluster's: its own notifier announces it
        remote.to("OK")
        assert await service.handle(encode(remote.to("ERR", (9,))), STATUS_EVENTS)
        for sub_id, options in (("same", {}), ("held", {"hold_for": 3600}), ("other", {"lag_seconds_threshold": 300})):
            options = {"lag_seconds_threshold": 600, **options}
            await store.put(SubscriptionConfig(id=sub_id, url="http://127.0.0.1:9/", **options), create=True)
        await service.repeat_once()
        await service.repeat_once()  # nothing more
        assert await service.handle(_crossing("billing", Alert.LAG_SECONDS, 600.0, 2, False), LAG_EVENTS)
        assert await redis.hkeys(keys.NOTIFY_ACTIVE) == [b"elsewhere/remote"]  # billing's is over: gone
    finally:
        await service.redis.aclose()
    sent = sorted((d.subscription_id, d.kind) for d in await _deliveries(redis))
    assert sent == [
        ("first", "lag-close"),
        ("first", "lag-open"),
        ("first", "open"),  # (it covered the remote group's event when it came)
        ("same", "lag-close"),
        ("same", "lag-open"),
    ]
    assert await redis.hlen(keys.notify_state("held")) == 0  # the held open was dropped by the close


async def test_an_incident_announced_anew_is_closed_anew_and_the_evaluators_close_still_ends_it(
    kafka, redis_server, redis
):
    """Narrowed, widened (told anew), narrowed again: the second close is news, not a duplicate of the first (its
    id comes from the state as kept). A lag alert told anew is ended by the evaluator's own close, whose id the
    first close must not have taken."""
    store = SubscriptionStore(redis)
    hook = SubscriptionConfig(id="hook", url="http://127.0.0.1:9/", lag_seconds_threshold=600)
    await store.put(hook, create=True)
    await store.put(SubscriptionConfig(id="keeps", url="http://127.0.0.1:9/", lag_seconds_threshold=600), create=True)
    service = NotifierService(make_config(kafka.bootstrap, redis_server.url, **FAST), "local", http_port=0)
    t = Timeline("billing")
    t.to("OK")
    try:
        await service.repeat_once()
        assert await service.handle(encode(t.to("ERR", (9,))), STATUS_EVENTS)
        assert await service.handle(_crossing("billing", Alert.LAG_SECONDS, 600.0, 1, True), LAG_EVENTS)
        await evaluator_records(redis, "billing", "ERR", lag_crossings=1)
        for config in (dataclasses.replace(hook, group_denylist="^billing$"), hook) * 2:
            await store.put(config, create=False)
            await service.repeat_once()
        assert await service.handle(_crossing("billing", Alert.LAG_SECONDS, 600.0, 2, False), LAG_EVENTS)
    finally:
        await service.redis.aclose()
    sent = sorted((d.created_at, d.kind, d.reason) for d in await _deliveries(redis) if d.subscription_id == "hook")
    assert [(kind, reason) for _, kind, reason in sent if kind.endswith("close")] == [
        ("close", "unsubscribed"),
        ("lag-close", "unsubscribed"),
        ("close", "unsubscribed"),
        ("lag-close", "unsubscribed"),
        ("lag-close", None),  # the evaluator's: the group is back under
    ]
    assert await redis.hkeys(keys.notify_state("hook")) == [b"local/billing"]  # told anew, still ERR


async def test_an_event_decided_under_the_old_subscriptions_but_recorded_after_the_look_is_closed_a_tick_later(
    kafka, redis_server, redis
):
    """Another notifier reads the subscriptions' version with the group's state, the subscription is narrowed, the
    first look finds nothing, then that notifier records its open: the next tick looks again and closes it (else
    it would be repeated, and open at the receiver, for good)."""
    store = SubscriptionStore(redis)
    hook = SubscriptionConfig(id="hook", url="http://127.0.0.1:9/", send_interval=60)
    await store.put(hook, create=True)
    config = make_config(kafka.bootstrap, redis_server.url, **FAST)
    looking, late = NotifierService(config, "local", http_port=0), NotifierService(config, "local", http_port=0)
    record = late.outbox.record

    async def narrowed_meanwhile(*args):
        late.outbox.record = record
        await store.put(dataclasses.replace(hook, group_denylist="^billing$"), create=False)
        await looking.repeat_once()  # the look at the change: nothing kept yet
        return await record(*args)

    t = Timeline("billing")
    t.to("OK")
    try:
        await looking.repeat_once()
        late.outbox.record = narrowed_meanwhile
        assert await late.handle(encode(t.to("ERR", (9,))), STATUS_EVENTS)
        assert await redis.hlen(keys.notify_state("hook")) == 1
        await looking.repeat_once()
        await looking.repeat_once()  # nothing more
    finally:
        for service in (looking, late):
            await service.redis.aclose()
    assert sorted((d.kind, d.reason) for d in await _deliveries(redis)) == [("close", "unsubscribed"), ("open", None)]
    assert await redis.hlen(keys.notify_state("hook")) == 0 and await redis.zcard(keys.NOTIFY_REPEATS) == 0


async def test_an_incident_that_ends_while_it_is_being_announced_is_not_announced(kafka, redis_server, redis):
    """The group's OK event is decided between the look's read of the incident's latest event and its record: the
    announcement, made from the ERR event, would open an incident already over (never closed, repeated for good),
    and tell the subscription that heard the close an open again."""
    store = SubscriptionStore(redis)
    await store.put(SubscriptionConfig(id="first", url="http://127.0.0.1:9/"), create=True)
    config = make_config(kafka.bootstrap, redis_server.url, **FAST)
    looking, other = NotifierService(config, "local", http_port=0), NotifierService(config, "local", http_port=0)
    active = looking.outbox.active
    t = Timeline("billing")
    t.to("OK")

    async def ends_meanwhile():
        read = [entry async for entry in active()]
        assert await other.handle(encode(t.to("OK")), STATUS_EVENTS)
        for entry in read:
            yield entry

    try:
        await looking.repeat_once()
        assert await other.handle(encode(t.to("ERR", (9,))), STATUS_EVENTS)
        await evaluator_records(redis, "billing", "ERR")  # (the evaluator's record of the OK comes later)
        await store.put(SubscriptionConfig(id="late", url="http://127.0.0.1:9/", send_interval=60), create=True)
        looking.outbox.active = ends_meanwhile
        await looking.repeat_once()
    finally:
        for service in (looking, other):
            await service.redis.aclose()
    assert sorted((d.subscription_id, d.kind) for d in await _deliveries(redis)) == [
        ("first", "close"),
        ("first", "open"),
    ]
    assert await redis.hlen(keys.notify_state("late")) == 0 and await redis.zcard(keys.NOTIFY_REPEATS) == 0


async def test_a_kept_event_the_evaluator_no_longer_shows_is_not_announced(kafka, redis_server, redis):
    """An entry left stale (an event this notifier missed, an older event written late by a replica losing its
    partition) would open, for subscriptions to come, an incident nothing would ever close: the evaluator's own
    record decides. Its status moved on to ERR: the WARN event is not announced either (ERR's event will be)."""
    store = SubscriptionStore(redis)
    config = make_config(kafka.bootstrap, redis_server.url, **FAST)
    service = NotifierService(config, "local", http_port=0)
    over, moved_on = Timeline("over"), Timeline("moved-on")
    try:
        await service.repeat_once()
        for t, status in ((over, "OK"), (moved_on, "ERR")):
            t.to("OK")
            assert await service.handle(encode(t.to("WARN", (9,))), STATUS_EVENTS)
            await evaluator_records(redis, t.group, status)
        assert await service.handle(_crossing("lagging", Alert.LAG_SECONDS, 600.0, 1, True), LAG_EVENTS)
        await evaluator_records(redis, "lagging", lag_crossings=2)  # back under since
        await store.put(
            SubscriptionConfig(id="late", url="http://127.0.0.1:9/", lag_seconds_threshold=600), create=True
        )
        await service.repeat_once()
    finally:
        await service.redis.aclose()
    assert await _deliveries(redis) == []


async def test_a_repeat_due_for_a_group_no_longer_covered_is_a_close(kafka, redis_server, redis):
    """A rolling deploy narrows the configuration file: a notifier still on the old file records an open after the
    new one's start-up look. The new one's repeat timer closes it instead of repeating it."""
    wide = SubscriptionConfig(id="hook", url="http://127.0.0.1:9/", send_interval=60)
    config = make_config(kafka.bootstrap, redis_server.url, **FAST)
    new = NotifierService(
        dataclasses.replace(config, subscriptions=[dataclasses.replace(wide, group_denylist="^billing$")]),
        "local",
        http_port=0,
    )
    old = NotifierService(dataclasses.replace(config, subscriptions=[wide]), "local", http_port=0)
    t = Timeline("billing")
    t.to("OK")
    try:
        await new.repeat_once()  # its look at start-up: nothing kept yet
        assert await old.handle(encode(t.to("ERR", (9,))), STATUS_EVENTS)
        await new.repeat_once(now_ms() + 61_000)
    finally:
        for service in (new, old):
            await service.redis.aclose()
    assert sorted((d.kind, d.reason) for d in await _deliveries(redis)) == [("close", "unsubscribed"), ("open", None)]
    assert await redis.hlen(keys.notify_state("hook")) == 0 and await redis.zcard(keys.NOTIFY_REPEATS) == 0


async def test_only_changed_subscriptions_are_looked_at_and_one_made_again_the_same_is_told_anew(
    kafka, redis_server, redis
):
    """A change looks at the subscriptions it changed (at 10k incidents and 100 subscriptions looking at all took
    15-25 s per change), and at those told of nothing: deleted and made again the same between two ticks, a
    subscription lost what it was told, and must hear of what goes on."""
    store = SubscriptionStore(redis)
    hook = SubscriptionConfig(id="hook", url="http://127.0.0.1:9/")
    await store.put(hook, create=True)
    await store.put(SubscriptionConfig(id="quiet", url="http://127.0.0.1:9/", threshold="ERR"), create=True)
    service = NotifierService(make_config(kafka.bootstrap, redis_server.url, **FAST), "local", http_port=0)
    t = Timeline("billing")
    t.to("OK")
    try:
        await service.repeat_once()
        assert await service.handle(encode(t.to("WARN", (9,))), STATUS_EVENTS)  # hook told; quiet (ERR) not
        await evaluator_records(redis, "billing", "WARN")
        looked = []
        announce = service.scopes.announce_going_on

        async def recording(now, subscriptions=None):
            looked.append(sorted(s.id for s in subscriptions))
            return await announce(now, subscriptions)

        service.scopes.announce_going_on = recording
        await store.delete("hook")
        await store.put(hook, create=True)
        await service.repeat_once()
    finally:
        await service.redis.aclose()
    assert looked == [["hook", "quiet"]]  # quiet: told of nothing (as it should be: below its threshold)
    opens = [d for d in await _deliveries(redis) if d.kind == "open"]
    assert [d.subscription_id for d in opens] == ["hook", "hook"]
    assert len({d.notification_id for d in opens}) == 2  # told anew, not a duplicate


async def test_a_notifier_started_with_the_subscriptions_of_the_last_look_does_not_look_at_every_incident_again(
    kafka, redis_server, redis
):
    """A completed look (its second tick) is kept in Redis: the next notifier to start with the same subscriptions
    looks at none of them (every start looked at all: 15-25 s at 10k incidents and 100 subscriptions), and one
    started with a subscription changed looks at that one only."""
    hook = SubscriptionConfig(id="hook", url="http://127.0.0.1:9/")
    other = SubscriptionConfig(id="other", url="http://127.0.0.1:9/")
    config = make_config(kafka.bootstrap, redis_server.url, **FAST)
    t = Timeline("billing")
    t.to("OK")

    async def looked_at_start(subscriptions, event=None):
        service = NotifierService(dataclasses.replace(config, subscriptions=subscriptions), "local", http_port=0)
        looked: list[list[str]] = []
        announce = service.scopes.announce_going_on

        async def recording(now, subscriptions=None):
            looked.append(sorted(s.id for s in subscriptions))
            return await announce(now, subscriptions)

        service.scopes.announce_going_on = recording
        try:
            if event is not None:
                assert await service.handle(event, STATUS_EVENTS)  # both told: neither is "told nothing"
            await service.repeat_once()
            await service.repeat_once()  # the look's second tick: the look is recorded
        finally:
            await service.redis.aclose()
        return looked[0]

    assert await looked_at_start([hook, other], encode(t.to("WARN", (9,)))) == ["hook", "other"]
    assert await looked_at_start([hook, other]) == []
    narrowed = dataclasses.replace(other, group_allowlist="^orders$")
    assert await looked_at_start([hook, narrowed]) == ["other"]
    assert [(d.subscription_id, d.kind, d.reason) for d in await _deliveries(redis) if d.kind == "close"] == [
        ("other", "close", "unsubscribed")
    ]

"""Issue 18 row 3 through a running notifier: hostile templates cost their budget once, not at every event.

Each render of a never-ending template takes a template worker's whole time budget and a restart, and the workers
are shared by every templated subscription: with N such subscriptions every event used to hold up the other
templated notifications by about N seconds (100 of them: a minute and a half, at every event). A template that ran
over its budget is now not rendered again for a while: at the next event its deliveries are dead-lettered at once,
without a worker, and the other templated notification goes out.
"""

from lagwatch.services.notifier.dlq import read_dead_letters
from lagwatch.services.notifier.service import NotifierService
from lagwatch.shared.notifications.subscriptions.store import SubscriptionStore
from lagwatch.shared.runtime.config import SubscriptionConfig
from tests.kafka_helpers import FAST_NOTIFIER, eventually, make_config, running
from tests.services.notifier.test_notifier_service import STATUS_TOPIC, publish
from tests.services.notifier.test_notifier_support import Receiver, Timeline

DLQ = "lagwatch.dlq"
NESTED_LOOPS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
HOSTILE = 6


async def test_a_hostile_template_costs_its_budget_once_not_at_every_event(kafka, redis_server, redis):
    kafka.create_topic(STATUS_TOPIC, 1)
    kafka.create_topic(DLQ, 1)
    store = SubscriptionStore(redis)
    async with Receiver() as receiver:
        for i in range(HOSTILE):  # each with its own template text and destination
            hostile = SubscriptionConfig(
                id=f"hostile-{i}", url=f"http://127.0.0.1:9/{i}", body_template=f"{NESTED_LOOPS}{i}"
            )
            await store.put(hostile, create=True)
        templated = SubscriptionConfig(id="templated", url=receiver.url(), body_template="{{ event.group }}")
        await store.put(templated, create=True)
        config = make_config(kafka.bootstrap, redis_server.url, **FAST_NOTIFIER)
        events = {}
        async with running(NotifierService(config, "local", http_port=0)):
            for n, group in enumerate(("first", "second"), start=1):
                t = Timeline(group)
                ok, opened = t.to("OK"), t.to("ERR", (10,))
                events[opened["event_id"]] = group
                await publish(kafka.bootstrap, ok, opened)
                await receiver.wait_for(n, timeout=60)
                letters = await eventually(lambda n=n: _all_letters(kafka, n * HOSTILE), timeout=60)  # settled
    assert [r.body for r in receiver.requests] == [b"first", b"second"]
    errors = {(events[x["delivery_id"].split(".")[0]], x["subscription_id"]): x["error"] for x in letters}
    assert all("time budget" in errors["first", f"hostile-{i}"] for i in range(HOSTILE)), errors
    assert all("not rendered again" in errors["second", f"hostile-{i}"] for i in range(HOSTILE)), errors


async def _all_letters(kafka, n):
    letters = await read_dead_letters({"bootstrap_servers": kafka.bootstrap}, DLQ)
    return letters if len(letters) >= n else None

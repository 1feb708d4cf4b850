"""Issue 18 rows 2 and 12 through a running notifier: a subscription whose URL spells a private address in a way a
check on the text misses is never sent to.

Such a URL may have been stored before the address guard existed (or by hand in Redis): the notifier, with private
targets not allowed, checks the address each connection really goes to, so the request is refused for good and
dead-lettered, and the receiver listening on that private address sees nothing.
"""

import asyncio

import pytest

from lagwatch.services.notifier.dlq import read_dead_letters
from lagwatch.services.notifier.service import NotifierService
from lagwatch.shared.notifications.subscriptions.store import SubscriptionStore
from lagwatch.shared.runtime.config import SubscriptionConfig
from tests.kafka_helpers import FAST_NOTIFIER, eventually, make_config, running
from tests.services.notifier.test_notifier_service import STATUS_TOPIC, publish
from tests.services.notifier.test_notifier_support import Receiver, Timeline

DLQ = "lagwatch.dlq"
LOOK_ALIKES = {
    "full-width": "http://\uff11\uff12\uff17.\uff10.\uff10.\uff11:{port}/hook",  # row 2: the client reads 127.0.0.1
    "ideographic-stops": "http://127\u30020\u30020\u30021:{port}/hook",
    "decimal": "http://2130706433:{port}/hook",  # 127.0.0.1 as one number
}


@pytest.mark.parametrize("spelling", LOOK_ALIKES)
async def test_a_running_notifier_never_sends_to_a_private_address_however_it_is_spelt(
    kafka, redis_server, redis, spelling
):
    kafka.create_topic(STATUS_TOPIC, 1)
    kafka.create_topic(DLQ, 1)
    config = make_config(
        kafka.bootstrap, redis_server.url, **{**FAST_NOTIFIER, "NOTIFIER__ALLOW_PRIVATE_TARGETS": "false"}
    )
    async with Receiver() as receiver:
        url = LOOK_ALIKES[spelling].format(port=receiver.port)
        await SubscriptionStore(redis).put(SubscriptionConfig(id="old", url=url), create=True)  # as stored long ago
        t = Timeline("billing")
        async with running(NotifierService(config, "local", http_port=0)):
            await publish(kafka.bootstrap, t.to("OK"), t.to("ERR", (10,)))
            await eventually(lambda: _sent_or_dead_lettered(receiver, kafka), 40)
            await asyncio.sleep(0.3)
        assert receiver.requests == []  # (the old client normalised the host after the check, and sent)
    (letter,) = await read_dead_letters({"bootstrap_servers": kafka.bootstrap}, DLQ)
    assert letter["subscription_id"] == "old" and "target refused" in letter["error"], letter
    assert "127.0.0.1 is a private" in letter["error"] and letter["attempts"] == 1, letter


async def _sent_or_dead_lettered(receiver, kafka):
    return receiver.requests or await read_dead_letters({"bootstrap_servers": kafka.bootstrap}, DLQ)

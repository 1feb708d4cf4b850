"""Counts in notifications are the group's, not the length of a list: a group with 5,000 partitions not OK has its
event cut under Kafka's record size (`status_event.fitted`, as the evaluator publishes it), listing only the worst
that fit, and every channel still says "5,000 of 5,000". The notifier reads the event from the status topic (the
Kafka mock) and sends to real servers: an HTTP receiver for Slack, Teams and PagerDuty, aiosmtpd for e-mail."""

from email import message_from_bytes
from email.policy import default as default_policy

from aiokafka import AIOKafkaProducer

from lagwatch.services.notifier.service import NotifierService
from lagwatch.shared.events.status_event import Incident, fitted, record_key, transition
from lagwatch.shared.protocol.types import GroupStatus, OffsetEntry, PartitionStatus, Status
from lagwatch.shared.runtime.clock import now_ms
from tests.kafka_helpers import CLUSTER, eventually, running
from tests.services.notifier.test_notifier_channels import certificate, email_subscription, smtp_server  # noqa: F401 (a fixture)
from tests.services.notifier.test_notifier_delivery import config_for
from tests.services.notifier.test_notifier_service import STATUS_TOPIC
from tests.services.notifier.test_notifier_support import Receiver, mailed

PARTITIONS = 5_000
GROUP = "payments"


def all_stopped() -> bytes:
    """The event of `GROUP` going OK -> ERR with every partition stopped, as the evaluator publishes it (fitted)."""
    now = now_ms()
    start, end = OffsetEntry(10, now - 600_000), OffsetEntry(20, now - 300_000)
    parts = tuple(
        PartitionStatus(
            "payments.ledger-entries.v2", p, Status.STOP, start, end, 1_000 + p, 1.0,
            f"/10.1.{p // 250}.{p % 250}", f"payments-ledger-consumer-{p:04d}",
        )
        for p in range(PARTITIONS)
    )  # fmt: skip
    status = GroupStatus(CLUSTER, GROUP, Status.ERR, 1.0, parts, parts[-1], sum(p.current_lag for p in parts))
    change = transition(CLUSTER, GROUP, Status.OK, 1, Incident(None, None), status, now)
    assert change is not None
    raw, listed = fitted(change.event)
    assert 0 < listed < PARTITIONS  # what the notifier gets lists only some of them
    return raw


async def test_every_channel_counts_the_partitions_not_ok_of_an_event_cut_to_fit(certificate, redis_server, kafka):  # noqa: F811
    kafka.create_topic(STATUS_TOPIC, 1)
    async with Receiver(default=(202, {})) as receiver:
        with smtp_server(certificate) as (port, mailbox):
            subscriptions = [
                {"id": "slack", "type": "slack", "url": receiver.url("/slack")},
                {"id": "teams", "type": "msteams", "url": receiver.url("/teams")},
                {"id": "pd", "type": "pagerduty", "url": receiver.url("/pd"), "routing_key": "R0UT1NGKEY0123"},
                email_subscription(port, extra_ca=certificate[0].read_text()),
            ]
            async with running(NotifierService(config_for(kafka, redis_server, subscriptions), "local", http_port=0)):
                async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
                    await producer.send_and_wait(STATUS_TOPIC, all_stopped(), key=record_key(CLUSTER, GROUP))
                await receiver.wait_for(3, timeout=30)
                await eventually(lambda: mailed(mailbox), timeout=30)
    by_path = {r.path: r.json() for r in receiver.requests}

    slack = by_path["/slack"]
    assert "*Partitions not OK*\n5,000 of 5,000" in [f["text"] for f in slack["blocks"][1]["fields"]]
    worst = slack["attachments"][0]["blocks"][0]["text"]["text"]
    assert worst.endswith("\n…and 4,995 more")  # five shown

    facts = by_path["/teams"]["attachments"][0]["content"]["body"][1]["facts"]
    assert {"title": "Partitions not OK", "value": "5,000 of 5,000"} in facts

    assert by_path["/pd"]["payload"]["custom_details"]["Partitions not OK"] == "5,000 of 5,000"

    (envelope,) = mailbox.envelopes
    text = message_from_bytes(envelope.content, policy=default_policy).get_content()
    assert "Partitions not OK: 5,000 of 5,000" in text.splitlines()

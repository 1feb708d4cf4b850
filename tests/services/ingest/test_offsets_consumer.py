"""The offsets topic's reader (services/ingest/offsets_consumer.py) against the Kafka mock."""

import time

from lagwatch.services.ingest.offsets_consumer import OffsetsConsumer
from tests.kafka_helpers import produce

TOPIC = "offsets-like"
LONG_TIMEOUT_S = 30.0


async def _revoked(partitions):
    return None


async def test_a_fetch_hands_over_what_has_arrived_instead_of_waiting_out_its_timeout_for_a_full_batch(kafka):
    """A quiet cluster commits a few records at a time: a fetch for up to 10k records returns them as soon as they
    are here (librdkafka's `consume(n, timeout)` would hold them until the timeout, waiting for n: every commit's
    status event came that much later)."""
    kafka.create_topic(TOPIC, 1)
    settings = {
        "bootstrap.servers": kafka.bootstrap,
        "group.id": "offsets-reader-test",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    consumer = OffsetsConsumer(settings, TOPIC, on_assigned=lambda partitions: None, on_revoked=_revoked)
    await consumer.start()
    try:
        await produce(kafka.bootstrap, TOPIC, {0: 3})
        started, records = time.monotonic(), []
        while len(records) < 3:
            records += (await consumer.fetch(10_000, LONG_TIMEOUT_S, want_ends=False)).records
        assert [r.value() for r in records] == [b"m0", b"m1", b"m2"]
        assert time.monotonic() - started < LONG_TIMEOUT_S / 2  # not a timeout waited out
    finally:
        await consumer.close()
        consumer.shutdown()

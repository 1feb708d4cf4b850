"""The event publisher counts what Kafka acknowledged (`lagwatch_events_published_total`, per cluster): once per
publish, by how many events of each cluster went."""

from prometheus_client import REGISTRY

from lagwatch.services.evaluator.publisher import EventPublisher

TOPIC = "lagwatch.status"


def published(cluster: str) -> float:
    return REGISTRY.get_sample_value("lagwatch_events_published_total", {"cluster": cluster}) or 0.0


async def test_every_acknowledged_event_is_counted_for_its_cluster(kafka):
    publisher = EventPublisher({"bootstrap_servers": kafka.bootstrap}, TOPIC)
    await publisher.start()
    try:
        before = {cluster: published(cluster) for cluster in ("east", "west")}
        items = [("east", f"g{i}", b'{"n":%d}' % i) for i in range(5)] + [("west", "g", b'{"n":-1}')]
        acknowledged = await publisher.publish(items)
        assert acknowledged == {event for _, _, event in items}
        assert published("east") - before["east"] == 5 and published("west") - before["west"] == 1
    finally:
        await publisher.stop()

"""How lagwatch's Faust apps (evaluator, notifier) reach Kafka: broker settings from a cluster's config, raw-bytes
topics, and Faust's Kafka transport with a short fetch wait, registered as the `lagwatchkafka://` broker scheme.

Faust fixes its consumer's `fetch.max.wait.ms` at 1.5 s. A broker answers a fetch as soon as data arrives, so that
mostly costs nothing, but a broker that holds fetches for the full wait (librdkafka's mock cluster does) would add
up to 1.5 s between a change notice and its evaluation: the evaluator's promise is a second. 100 ms bounds it.
"""

from __future__ import annotations

import faust
from faust.transport.drivers import TRANSPORTS
from faust.transport.drivers import aiokafka as driver

from lagwatch.shared.config import ClusterConfig
from lagwatch.shared.kafka_client import ssl_context

SCHEME = "lagwatchkafka"
FETCH_MAX_WAIT_MS = 100


class _ConsumerThread(driver.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport):
        consumer = super()._create_worker_consumer(transport)
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS  # read when the consumer starts its fetcher
        return consumer


class _Consumer(driver.Consumer):
    def _new_consumer_thread(self) -> driver.AIOKafkaConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class Transport(driver.Transport):
    Consumer = _Consumer


TRANSPORTS.aliases[SCHEME] = f"{__name__}:Transport"


def faust_broker_settings(cluster: ClusterConfig, name: str) -> dict:
    """Faust's spelling of the cluster's connection settings."""
    settings: dict = {"broker": ";".join(f"{SCHEME}://{s}" for s in cluster.bootstrap_servers)}
    context = ssl_context(cluster, name)
    if cluster.sasl.mechanism:
        settings["broker_credentials"] = faust.SASLCredentials(
            username=cluster.sasl.username,
            password=cluster.sasl.password,
            mechanism=cluster.sasl.mechanism,
            ssl_context=context,
        )
    elif context is not None:
        settings["broker_credentials"] = faust.SSLCredentials(context)
    return settings


def raw_topic(app: faust.App, name: str) -> faust.TopicT:
    """A topic whose keys and values the agent gets as bytes (lagwatch decodes its own JSON)."""
    return app.topic(name, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")

"""How lagwatch's Faust apps (evaluator, notifier) reach Kafka and live: one app set-up (broker settings from a
cluster's config, the settings every lagwatch app shares), raw-bytes topics, a start that a stop request cuts short
and a bounded stop, and Faust's Kafka transport with a short fetch wait, registered as the `lagwatchkafka://` scheme.

Faust fixes its consumer's `fetch.max.wait.ms` at 1.5 s. A broker answers a fetch as soon as data arrives, so that
mostly costs nothing, but a broker that holds fetches for the full wait (librdkafka's mock cluster does) would add
up to 1.5 s between a change notice and its evaluation: the evaluator's promise is a second. 100 ms bounds it.

aiokafka hands a group-coordination error it does not know (a SyncGroup or JoinGroup answer outside its list, e.g.
INVALID_REQUEST) to the application and stops coordinating until the application has seen it. Faust never looks
(it fetches through aiokafka's fetcher), which would leave the consumer out of its group for good; so the consumer
thread hands such errors back every second (logged), and aiokafka rejoins, as Kafka's Java consumer does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
from pathlib import Path
from typing import Any

import faust
from aiokafka.errors import KafkaError
from faust.transport.drivers import TRANSPORTS
from faust.transport.drivers import aiokafka as driver
from mode import Service

from lagwatch.shared.runtime.config import ClusterConfig
from lagwatch.shared.runtime.kafka_client import TOKEN_MECHANISMS, check_login, kerberos_for_aiokafka, ssl_context
from lagwatch.shared.runtime.kafka_login import token_provider

log = logging.getLogger(__name__)
SCHEME = "lagwatchkafka"
FETCH_MAX_WAIT_MS = 100
COORDINATOR_ERRORS_EVERY_S = 1.0
STOP_TIMEOUT_S = 15.0


def take_coordinator_error(consumer: Any) -> KafkaError | None:
    """The group-coordination error aiokafka is waiting for the application to see, if any, taken (so it goes on
    coordinating: it has already asked to rejoin). A coordinator that died for good is left for Faust to find."""
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is None or getattr(coordinator, "_pending_exception", None) is None:
        return None
    if coordinator._coordination_task.done():
        return None
    try:
        coordinator.check_errors()
    except KafkaError as exc:
        return exc
    return None


class _ConsumerThread(driver.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS  # read when the consumer starts its fetcher
        return consumer

    async def stop(self) -> None:
        """mode closes the loop it made for the thread only as that thread ends: a thread never started (the app
        stopped while Kafka was away) would leave it to be collected at exit, with an `Invalid file descriptor`."""
        started = self._started.is_set()
        await super().stop()
        if not started and not self.thread_loop.is_closed():
            self.thread_loop.close()

    def topic_partitions(self, topic: str) -> int | None:
        """The topic's partition count, from the client's metadata: faust's reads the group coordinator's snapshot of
        the subscription, which only the group's leader takes (to compute the assignment), so every other member
        would never know it."""
        partitions = None if self._consumer is None else self._consumer.partitions_for_topic(topic)
        return len(partitions) if partitions else None

    @Service.timer(COORDINATOR_ERRORS_EVERY_S)
    async def _hand_back_coordinator_errors(self) -> None:
        """Runs in the consumer thread's loop, where aiokafka's futures live."""
        error = take_coordinator_error(self._consumer)
        if error is not None:
            log.warning("Kafka consumer group %s: %r; rejoining", self.consumer.app.conf.id, error)


class _Consumer(driver.Consumer):
    def _new_consumer_thread(self) -> driver.AIOKafkaConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class Transport(driver.Transport):
    Consumer = _Consumer


TRANSPORTS.aliases[SCHEME] = f"{__name__}:Transport"


def faust_broker_settings(cluster: ClusterConfig, name: str, scheme: str = SCHEME) -> dict[str, Any]:
    """Faust's spelling of the cluster's connection settings (its aiokafka driver turns them into the same
    keyword arguments as `client_kwargs`); `scheme` names the transport (a service's own, built on this one)."""
    settings: dict[str, Any] = {"broker": ";".join(f"{scheme}://{s}" for s in cluster.bootstrap_servers)}
    context = ssl_context(cluster, name)
    check_login(cluster, name)
    sasl = cluster.sasl
    if sasl.mechanism in TOKEN_MECHANISMS:
        settings["broker_credentials"] = faust.OAuthCredentials(
            oauth_cb=token_provider(cluster, name), ssl_context=context
        )
    elif sasl.mechanism == "GSSAPI":
        kerberos_for_aiokafka(cluster, name)
        settings["broker_credentials"] = faust.GSSAPICredentials(
            kerberos_service_name=sasl.kerberos.service_name,
            kerberos_domain_name=sasl.kerberos.domain_name or None,
            ssl_context=context,
        )
    elif sasl.mechanism:
        settings["broker_credentials"] = faust.SASLCredentials(
            username=sasl.username, password=sasl.password, mechanism=sasl.mechanism, ssl_context=context
        )
    elif context is not None:
        settings["broker_credentials"] = faust.SSLCredentials(context)
    return settings


def raw_topic(app: faust.App, name: str) -> faust.TopicT:
    """A topic whose keys and values the agent gets as bytes (lagwatch decodes its own JSON)."""
    return app.topic(name, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")


def faust_app(
    group_id: str,
    cluster: ClusterConfig,
    name: str,
    role: str,
    session_timeout: float,
    *,
    scheme: str = SCHEME,
    **settings: Any,
) -> faust.App:
    """A lagwatch service's Faust app: the cluster's connection, `<client-id>-<role>` as client id, and what every
    lagwatch app wants; `settings` adds the service's own (offset reset, commit pace...), `scheme` its own
    transport (registered in faust's TRANSPORTS, subclassing `Transport`)."""
    # Faust makes a data dir even without tables, by default in the working directory (read-only in an image)
    settings.setdefault("datadir", str(Path(tempfile.gettempdir()) / f"{group_id}-data"))
    return faust.App(
        group_id,
        **faust_broker_settings(cluster, name, scheme),
        broker_client_id=f"{cluster.client_id}-{role}",
        topic_allow_declare=False,  # lagwatch's topics are created by whoever runs Kafka
        topic_disable_leader=True,
        web_enabled=False,  # health and metrics are served by HealthServer, like every lagwatch service
        broker_session_timeout=session_timeout,
        broker_heartbeat_interval=max(0.1, session_timeout / 3),
        stream_wait_empty=False,
        **settings,
    )


class GroupMembership:
    """Whether the app's consumer has joined its group: an assignment received, even an empty one (an instance beyond
    the topic's partitions is a standby, as ready as the others: a rolling update's surge instance may find none)."""

    def __init__(self, app: faust.App) -> None:
        self.joined = False
        app.on_partitions_assigned.connect(self._assigned)

    async def _assigned(self, sender: Any, /, *assigned: Any, signal: Any, **_: Any) -> None:
        self.joined = True


async def start_unless_stopping(app: faust.App, stopping: asyncio.Event) -> None:
    """Start the app; Faust's start can wait a long time on a consumer group that will not settle: a stop wins."""
    start = asyncio.ensure_future(app.start())
    stop = asyncio.ensure_future(stopping.wait())
    await asyncio.wait({start, stop}, return_when=asyncio.FIRST_COMPLETED)
    stop.cancel()
    if not start.done():
        start.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await start
    elif (failure := start.exception()) is not None:
        raise failure


async def stop_within(app: faust.App, what: str, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """Stop the app, for at most `timeout_s`: Faust's stop waits on its consumer, which can be stuck in a rebalance."""
    try:
        await asyncio.wait_for(app.stop(), timeout=timeout_s)
    except TimeoutError:
        log.warning("%s: Faust did not stop within %ss; exiting anyway", what, timeout_s)

"""lagwatch's Faust transport (shared/runtime/faust_kafka.py) against the Kafka mock: a group-coordination error that
aiokafka hands to the application does not leave a Faust app out of its consumer group."""

import asyncio
import contextlib
import re
import signal
import tempfile
import time
from pathlib import Path

import aiohttp
from aiokafka.errors import KafkaConnectionError
from aiokafka.protocol.group import SyncGroupRequest

from lagwatch.services.evaluator.service import EvaluatorService
from lagwatch.shared.runtime.faust_kafka import faust_app, raw_topic, start_unless_stopping, stop_within
from lagwatch.shared.windows.changes import ChangePublisher
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, evaluator_process, eventually, make_config, running
from tests.net_helpers import free_port
from tests.services.evaluator.test_evaluator import StatusTopic, commits

STATUS_TOPIC, CHANGES_TOPIC = "lagwatch.status", "lagwatch.changes"
INVALID_REQUEST = 42


def answer_next_sync_group_with(coordinator, error_code: int) -> list:
    """The broker's next SyncGroup answer carries `error_code` (what librdkafka's mock cluster answers a SyncGroup
    that reaches it after the group settled); returns a list that gets the error code once it was answered."""
    send, answered = coordinator._send_req, []

    async def send_req(request):
        response = await send(request)
        if isinstance(request, SyncGroupRequest) and not answered:
            response.error_code = error_code
            answered.append(error_code)
        return response

    coordinator._send_req = send_req
    return answered


async def test_an_evaluator_rejoins_its_group_after_an_unexpected_sync_group_error(kafka, redis_server, redis):
    """aiokafka stops coordinating after an unknown SyncGroup error until the application has seen it, which
    Faust's fetcher never does: the evaluator would hold no partitions (and evaluate nothing) from then on."""
    kafka.create_topic(STATUS_TOPIC, 3)
    kafka.create_topic(CHANGES_TOPIC, 4)
    config = make_config(kafka.bootstrap, redis_server.url, EVALUATOR__SWEEP_INTERVAL="3600")
    store = WindowStore(redis, config.window())
    notices = ChangePublisher({"bootstrap.servers": kafka.bootstrap}, CHANGES_TOPIC)
    await notices.start()
    try:
        async with StatusTopic(kafka.bootstrap) as topic, running(EvaluatorService(config, CLUSTER, http_port=0)) as ev:

            async def settled():
                owned = ev.owned_partitions()
                return owned == {0, 1, 2, 3} and ev.taken_over == owned

            await eventually(settled, timeout=30)
            thread = ev.app.consumer._thread
            coordinator = thread._consumer._coordinator
            generation = coordinator.generation
            answered = answer_next_sync_group_with(coordinator, INVALID_REQUEST)
            thread.thread_loop.call_soon_threadsafe(coordinator.request_rejoin)

            async def rejoined():  # and consuming again (a notice sent before its seek would be skipped)
                resumed = not ev.app.rebalancing and ev.app.consumer.flow_active
                return answered and coordinator.generation > generation and resumed and await settled()

            await eventually(rejoined, timeout=30)
            now = int(time.time() * 1000)  # and it evaluates what the changes topic says again
            await store.writes.add_broker_offsets(CLUSTER, "orders", [100], sampled_at=now)
            await store.writes.add_commits(CLUSTER, commits("billing", [100], now - 1000), now_ms=now)
            await notices.publish(CLUSTER, [("billing", "commits")])
            assert await topic.until("billing", 1, timeout=20) == [("NOTFOUND", "OK")]
    finally:
        await notices.stop()


async def test_a_stop_request_wins_over_a_faust_start_that_cannot_finish(redis_server):
    """A broker that accepts connections and never answers (a frozen one) keeps Faust's start waiting; a service
    asked to stop meanwhile stops at once instead of hanging, and the bounded stop returns."""
    silent = await asyncio.start_server(_never_answer, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    config = make_config(f"127.0.0.1:{port}", redis_server.url)
    app = faust_app("lagwatch-test-frozen", config.cluster(CLUSTER), CLUSTER, "test", 10.0)
    app.agent(raw_topic(app, "lagwatch.test"), name="lagwatch.test.agent")(_drain)
    stopping = asyncio.Event()
    asyncio.get_running_loop().call_later(1.0, stopping.set)
    started = time.monotonic()
    try:
        await start_unless_stopping(app, stopping)
        await stop_within(app, "test", timeout_s=5.0)
    finally:
        silent.close()
    assert stopping.is_set()
    assert time.monotonic() - started < 20  # aiokafka alone would wait 40 s for its first answer


async def test_an_app_stopped_before_its_consumer_thread_ran_closes_that_threads_event_loop(redis_server):
    """Kafka away at start-up, then a stop: the consumer thread never ran, and the event loop mode made for it was
    left open, collected at the process's exit after its own socket (a traceback in the log, now and then)."""
    config = make_config(f"127.0.0.1:{free_port()}", redis_server.url)  # nothing listens there
    app = faust_app("lagwatch-test-unstarted", config.cluster(CLUSTER), CLUSTER, "test", 10.0)
    app.agent(raw_topic(app, "lagwatch.test"), name="lagwatch.test.agent")(_drain)
    stopping = asyncio.Event()
    asyncio.get_running_loop().call_later(1.5, stopping.set)
    with contextlib.suppress(KafkaConnectionError):  # its producer's start fails, or the stop comes first
        await start_unless_stopping(app, stopping)
    await stop_within(app, "test", timeout_s=5.0)
    thread = app.consumer._thread
    assert not thread._started.is_set() and thread.thread_loop.is_closed()


async def _never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read()  # until the client hangs up
    writer.close()


async def _drain(stream) -> None:
    async for _ in stream:
        pass


def test_a_faust_apps_data_dir_is_under_the_temp_dir_not_the_working_directory(tmp_path, monkeypatch):
    """Faust creates its data dir even without tables: in the working directory it would fail on a read-only image
    and litter a checkout. A service can still name its own."""
    monkeypatch.chdir(tmp_path)
    config = make_config("127.0.0.1:9", "redis://127.0.0.1:1")
    app = faust_app("lagwatch-test-dir", config.cluster(CLUSTER), CLUSTER, "test", 10.0)
    assert Path(app.conf.datadir).parent == Path(tempfile.gettempdir())
    assert not Path(app.conf.datadir).is_relative_to(tmp_path)
    own = faust_app("lagwatch-test-dir", config.cluster(CLUSTER), CLUSTER, "test", 10.0, datadir=str(tmp_path / "d"))
    assert Path(own.conf.datadir) == tmp_path / "d"


async def test_an_instance_beyond_the_partitions_is_a_ready_standby(kafka, redis_server, tmp_path):
    """Two evaluators, one changes-topic partition: the one without a partition joined its group all the same and
    takes the partition over when the other goes. Taken for not ready, it held a rolling update (the surge instance
    never became ready) and was alerted as Kafka out of reach."""
    kafka.create_topic(STATUS_TOPIC, 1)
    kafka.create_topic(CHANGES_TOPIC, 1)
    config = make_config(kafka.bootstrap, redis_server.url, EVALUATOR__SWEEP_INTERVAL="3600")
    log_path = tmp_path / "other-evaluator.log"
    with log_path.open("w") as out:  # on a port of its own choosing, which its log says (no port race)
        other = evaluator_process(kafka.bootstrap, redis_server.url, out, EVALUATOR__SWEEP_INTERVAL="3600")

    async def other_url():
        found = re.search(r"health and metrics on (http://\S+)", log_path.read_text())
        return found.group(1) if found else None

    try:
        async with running(EvaluatorService(config, CLUSTER, http_port=0)) as ev:
            other_at = await eventually(other_url, timeout=60)
            await eventually(lambda: ready(other_at), timeout=60)
            await eventually(lambda: ready(ev.health.url), timeout=60)
            assert ev.owned_partitions() in ({0}, None)  # this one holds the partition, or none (the other does)
            assert await ready(other_at) and await ready(ev.health.url)
    except AssertionError as failed:
        raise AssertionError(f"{failed}\nother evaluator's log:\n{log_path.read_text()[-20_000:]}") from failed
    finally:
        other.send_signal(signal.SIGTERM)
        other.wait(timeout=30)


async def ready(url: str) -> bool:
    try:
        async with aiohttp.ClientSession() as http, http.get(f"{url}/readyz") as response:
            return response.status == 200
    except aiohttp.ClientError:
        return False

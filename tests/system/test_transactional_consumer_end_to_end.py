"""A caught-up consumer of transactional topics end to end (Burrow#651): it commits its last record + 1, and the log
end lies one further, past the transaction's commit marker (or, for the second, past an aborted transaction's marker).
With the log probe, the API, `/metrics`, the status topic and the dashboard all read both OK with lag 0, the partition
saying why (`lag_kind`, `unread_records`); a consumer with unread records keeps its true lag and status. With the
probe off, offsets alone read the caught-up ones ERR (STALL).

A real transactional producer writes to the Kafka mock, the consumers' commits are mirrored into `__consumer_offsets`
as the coordinator writes them, and a real ingest worker, evaluator and api run in-process. Each window is full and
never moves (intervals 3, min-distance 0, the same offset committed three times, spread over two minutes so that no
STOP comes first): by offsets alone, any lag in it is a STALL."""

import asyncio
import time

import aiohttp
import pytest

from lagwatch.devkit.offsets_topic_writer import OffsetCommitSpec
from lagwatch.services.api.service import ApiServer
from tests.kafka_helpers import CLUSTER, eventually, running
from tests.services.evaluator.test_evaluator import STATUS_TOPIC
from tests.services.ingest.test_log_probe import TRANSACTIONAL, abort_tail_consumer, transactional_consumers
from tests.services.ingest.test_probe_schedule import _probed, stalled_window_config
from tests.system.test_status_end_to_end import ingest_and_evaluator

CAUGHT_UP, BEHIND, ABORT_TAIL = "eos-caught-up", "eos-behind", "eos-abort-tail"
ABORTED = "refunds"  # its last transaction aborted
SPACING_MS = 60_000  # between a group's commits: the window spans two minutes, so it is not stopped meanwhile
MARKERS = {"lag_kind": "transaction-markers", "unread_records": 0}


@pytest.mark.parametrize("probing", [True, False], ids=["log probe", "offsets alone"])
async def test_a_caught_up_transactional_consumer_reads_ok_everywhere_and_one_behind_keeps_its_lag(
    kafka, redis_server, redis, probing
):
    for topic, partitions in ((TRANSACTIONAL, 1), (ABORTED, 1), ("lagwatch.changes", 4), (STATUS_TOPIC, 3)):
        kafka.create_topic(topic, partitions)
    caught_up, behind, log_end = await transactional_consumers(kafka.bootstrap)
    past_abort, aborted_end = await abort_tail_consumer(kafka.bootstrap, ABORTED)
    commits = {CAUGHT_UP: caught_up, BEHIND: behind, ABORT_TAIL: past_abort}  # the behind one: 10 records to read
    topics = {CAUGHT_UP: TRANSACTIONAL, BEHIND: TRANSACTIONAL, ABORT_TAIL: ABORTED}
    lags = {
        CAUGHT_UP: 0 if probing else log_end - caught_up,
        BEHIND: log_end - behind,
        ABORT_TAIL: 0 if probing else aborted_end - past_abort,
    }
    config = stalled_window_config(
        kafka, redis_server, INGEST__LOG_PROBE=str(probing).lower(), EVALUATOR__SWEEP_INTERVAL="0.5"
    )
    async with (
        ingest_and_evaluator(kafka, config) as (writer, status_topic),
        running(ApiServer(config, port=0)) as api,
        aiohttp.ClientSession() as http,
    ):
        await api.started.wait()
        first = int(time.time() * 1000) - 2 * SPACING_MS
        await writer.commits([OffsetCommitSpec(g, topics[g], 0, offset, first) for g, offset in commits.items()])
        for group in commits:  # a young window: OK, by offsets alone too
            assert await status_topic.until(group, 1) == [("NOTFOUND", "OK")]
        if probing:  # the window fills only once the probe has answered, so no evaluation comes before it
            await eventually(lambda: _probed(redis, commits[CAUGHT_UP]), timeout=30)
            await eventually(lambda: _probed(redis, commits[ABORT_TAIL], ABORTED), timeout=30)
        for step in (1, 2):
            at = first + step * SPACING_MS
            await writer.commits([OffsetCommitSpec(g, topics[g], 0, offset, at) for g, offset in commits.items()])

        behind = await eventually(lambda: _full_window(http, api.url, BEHIND), timeout=30)
        assert _verdict(behind) == ("ERR", "STALL", {}, lags[BEHIND])
        for group in (CAUGHT_UP, ABORT_TAIL):
            status = await eventually(lambda group=group: _full_window(http, api.url, group), timeout=30)
            expected_caught_up = ("OK", "OK", MARKERS) if probing else ("ERR", "STALL", {})
            assert _verdict(status) == (*expected_caught_up, lags[group]), group
            [part] = status["partitions"]
            assert part["end"]["offset"] == commits[group]  # Burrow's fields as they were: the newest commit

        for group, lag in lags.items():
            topic = topics[group]
            await eventually(lambda g=group, t=topic, lag=lag: _metrics_show(http, api.url, g, t, lag), timeout=30)
            await eventually(lambda g=group, lag=lag: _dashboard_shows(http, api.url, g, lag), timeout=30)
        for group in (CAUGHT_UP, ABORT_TAIL):
            detail = await _get(http, f"{api.url}/dashboard/api/group/{CLUSTER}/{group}")
            consumer = await _get(http, f"{api.url}/v3/kafka/{CLUSTER}/consumer/{group}")
            [slot] = consumer["topics"][topics[group]]
            assert slot["current-lag"] == lags[group]
            for part in (detail["status"]["partitions"][0], slot):
                assert {k: part.get(k) for k in MARKERS} == (MARKERS if probing else dict.fromkeys(MARKERS))

        await status_topic.until(BEHIND, 2)
        await asyncio.sleep(2)  # a few more sweeps: an ERR for a caught-up group would be published by now
        await status_topic.read()
    assert status_topic.transitions(BEHIND) == [("NOTFOUND", "OK"), ("OK", "ERR")]
    expected = [("NOTFOUND", "OK")] if probing else [("NOTFOUND", "OK"), ("OK", "ERR")]
    assert status_topic.transitions(CAUGHT_UP) == status_topic.transitions(ABORT_TAIL) == expected


async def _get(http: aiohttp.ClientSession, url: str) -> dict:
    async with http.get(url) as response:
        assert response.status == 200, (url, response.status)
        return await response.json()


async def _full_window(http: aiohttp.ClientSession, api_url: str, group: str) -> dict | None:
    """The group's `/lag` status once its partition's window holds the three commits (None until then)."""
    async with http.get(f"{api_url}/v3/kafka/{CLUSTER}/consumer/{group}/lag") as response:
        if response.status != 200:
            return None
        status = (await response.json())["status"]
    return status if status["partitions"][0]["complete"] == 1.0 else None


def _verdict(status: dict) -> tuple:
    """(group status, partition status, lagwatch's marker fields on the partition, totallag)."""
    [part] = status["partitions"]
    markers = {k: part[k] for k in MARKERS if k in part}
    assert status["maxlag"]["current_lag"] == part["current_lag"] == status["totallag"]
    return status["status"], part["status"], markers, status["totallag"]


async def _metrics_show(http: aiohttp.ClientSession, api_url: str, group: str, topic: str, lag: int) -> bool:
    async with http.get(f"{api_url}/metrics") as response:
        metrics = await response.text()
    labels = f'cluster="{CLUSTER}",consumer_group="{group}"'
    return all(
        line in metrics.splitlines()
        for line in (
            f"burrow_kafka_consumer_lag_total{{{labels}}} {lag}",
            f"lagwatch_consumer_group_max_lag{{{labels}}} {lag}",
            f'burrow_kafka_consumer_partition_lag{{{labels},topic="{topic}",partition="0"}} {lag}',
        )
    )


async def _dashboard_shows(http: aiohttp.ClientSession, api_url: str, group: str, lag: int) -> bool:
    overview = await _get(http, f"{api_url}/dashboard/api/overview?cluster={CLUSTER}&q={group}")
    rows = [row for row in overview["groups"] if row["group"] == group]
    return bool(rows) and rows[0]["totallag"] == lag and rows[0]["maxlag"]["current_lag"] == lag

"""Property-based (issue 18, "Done when"): any offsets-topic record, through the decoder, the window store and the api.

Whatever bytes a batch holds — well-formed commits with any numbers, commit keys with junk values, random record
versions, random bytes, no key — the ingest's `BatchProcessor` counts every record and stores only what it can read
(real Redis, log ends from the Kafka mock), never raises, and every v3 read of every group named in the batch then
answers 200 or 404 JSON, never 500, with only exact, in-range numbers in what it shows.
"""

import asyncio
import json
import struct
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lagwatch.devkit import offsets_encoders as encoders
from lagwatch.services.api.service import ApiServer
from lagwatch.services.ingest.broker_offsets import BrokerOffsets
from lagwatch.services.ingest.processor import BatchProcessor
from lagwatch.shared.runtime.kafka_client import client_kwargs
from lagwatch.shared.runtime.redis_client import connect
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, make_config, produce
from tests.services.ingest.raw_record import RawRecord

INT64 = st.integers(-(2**63), 2**63 - 1)
NUMBERS = INT64 | st.integers(-2, 2**53 + 2) | st.sampled_from([0, 1, 2**53 - 1, 2**53, 2**62, 2**63 - 1, -1])
NOW_MS = int(time.time() * 1000)
TIMESTAMPS = st.integers(NOW_MS - 3_600_000, NOW_MS + 60_000) | NUMBERS  # recent ones are stored, not expired
GROUPS = st.sampled_from(["billing", "audit"]) | st.text(min_size=1, max_size=12)
TOPICS = st.sampled_from(["orders", "orders", "gone"]) | st.text(min_size=1, max_size=12)
PARTITIONS = st.sampled_from([0, 1]) | st.integers(-(2**31), 2**31 - 1)


@st.composite
def commit(draw):
    group, topic, partition = draw(GROUPS), draw(TOPICS), draw(PARTITIONS)
    key = encoders.encode_offset_commit_key(group, topic, partition, version=draw(st.sampled_from([0, 1])))
    if draw(st.booleans()):
        value = encoders.encode_offset_commit_value(
            draw(NUMBERS),
            draw(NUMBERS),
            version=draw(st.sampled_from([1, 2, 3, 4])),
            metadata=draw(st.text(max_size=5)),
        )
    else:
        value = draw(st.binary(max_size=40) | st.none())
    if draw(st.integers(0, 9)) == 0:  # truncated or extended
        value = (value or b"")[: draw(st.integers(0, 30))] + draw(st.binary(max_size=4))
    return group, key, value


@st.composite
def other_record(draw):
    key = draw(
        st.none()
        | st.binary(max_size=40)
        | st.builds(
            lambda v, rest: struct.pack(">h", v) + rest, st.integers(-(2**15), 2**15 - 1), st.binary(max_size=30)
        )
        | st.builds(encoders.encode_group_metadata_key, GROUPS)
    )
    return None, key, draw(st.none() | st.binary(max_size=80))


GROUP_METADATA_KEY_VERSION = struct.pack(">h", 2)
BATCHES = st.lists(commit() | other_record(), min_size=1, max_size=30)


class Stack:
    """Redis, the Kafka mock's log ends and the api: the api on a loop in its own thread, the processor on ours."""

    def __init__(self, kafka, redis_url, **settings):
        self.config = make_config(kafka.bootstrap, redis_url, **({"STORAGE__INTERVALS": "3"} | settings))
        self.loop = asyncio.new_event_loop()
        self.redis = connect(self.config.redis)
        self.store = WindowStore(self.redis, self.config.window())
        self.api = ApiServer(self.config, port=0)
        self.api_loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.api_loop.run_until_complete, args=(self.api.run(),), daemon=True)

    def __enter__(self):
        self.thread.start()
        asyncio.run_coroutine_threadsafe(asyncio.wait_for(self.api.started.wait(), 30), self.api_loop).result(60)
        self.broker_offsets = self.loop.run_until_complete(self._broker_offsets())
        self.loop.run_until_complete(self.broker_offsets.start())
        self.loop.run_until_complete(self.broker_offsets.tick())
        return self

    async def _broker_offsets(self):  # its Kafka consumer wants the loop it will run on
        kafka = client_kwargs(self.config.cluster(CLUSTER), CLUSTER)
        return BrokerOffsets(CLUSTER, self.store, kafka, offset_refresh=0.3, topic_refresh=1)

    def __exit__(self, *exc):
        self.loop.run_until_complete(self.broker_offsets.stop())
        self.loop.run_until_complete(self.redis.aclose())
        self.loop.close()
        self.api_loop.call_soon_threadsafe(self.api.stopping.set)
        self.thread.join(timeout=30)

    def process(self, records):
        processor = BatchProcessor(CLUSTER, self.store, self.broker_offsets, self.config.group_filter(CLUSTER))
        self.loop.run_until_complete(self.redis.flushdb())
        self.loop.run_until_complete(self.broker_offsets.tick())  # the log ends back in Redis
        return self.loop.run_until_complete(processor.process(records))

    def get(self, path):
        try:
            with urllib.request.urlopen(self.api.url + path, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())


@pytest.fixture
def stack(kafka, redis_server):
    kafka.create_topic("orders", 2)
    asyncio.run(produce(kafka.bootstrap, "orders", {0: 20, 1: 5}))
    with Stack(kafka, redis_server.url) as stack:
        yield stack


def test_any_offsets_topic_record_is_counted_and_every_read_of_what_it_stored_answers(stack):
    @example(batch=[commit_of("billing", "orders", 0, 5, NOW_MS), commit_of("billing", "orders", 0, 6, 2**62)])  # row 4
    @example(batch=[commit_of("billing", "orders", 0, 2**63 - 1, 1)])
    @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
    @given(batch=BATCHES)
    def any_batch(batch):
        records = [RawRecord(key, value, 0, i, 1) for i, (_, key, value) in enumerate(batch)]
        tally = stack.process(records)
        stored.update(name for name in tally if name.startswith("outcome:"))
        assert tally["records"] == len(records)
        # each record is counted once: skipped with its reason, or stored (an outcome), or — group metadata only —
        # applied as a rebalance (not counted); a member's unreadable assignment is counted besides its record
        once = sum(n for name, n in tally.items() if name not in ("records", "batches", "decode_error:assignment"))
        metadata = sum(1 for _, key, _ in batch if key is not None and key[:2] == GROUP_METADATA_KEY_VERSION)
        assert len(records) - metadata <= once <= len(records), (tally, metadata)
        groups = {group for group, _, _ in batch if group is not None}
        reads = ["/v3/kafka", f"/v3/kafka/{CLUSTER}", f"/v3/kafka/{CLUSTER}/consumer", f"/v3/kafka/{CLUSTER}/topic"]
        for group in sorted(groups):
            name = urllib.parse.quote(group, safe="")
            base = f"/v3/kafka/{CLUSTER}/consumer/{name}"
            reads += [base, f"{base}/status", f"{base}/lag", f"/dashboard/api/group/{CLUSTER}/{name}"]
        for path in reads:
            status, body = stack.get(path)
            assert status in (200, 404), (path, status, body)
            if path.endswith("/lag") and status == 200:
                for partition in body["status"]["partitions"]:
                    for end in (partition["start"], partition["end"]):
                        if end:
                            assert all(isinstance(end[k], int) and 0 <= end[k] < 2**53 for k in ("offset", "timestamp"))

    stored: set[str] = set()
    any_batch()
    assert "outcome:appended" in stored  # the property covered stored windows, not only refused records


def commit_of(group, topic, partition, offset, timestamp):
    key = encoders.encode_offset_commit_key(group, topic, partition)
    return group, key, encoders.encode_offset_commit_value(offset, timestamp)

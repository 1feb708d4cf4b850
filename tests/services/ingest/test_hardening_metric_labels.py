"""Issue 18 row 11: corrupt records cannot mint metric series.

1000 random and corrupt records on the offsets topic (random versions, truncated keys, junk values, no key) used to
make one `type` label per raw version number on the ingest's and the api's `/metrics` (961 new series). Now both
show the ingest counters' labels from a fixed set only; the api also folds values an older ingest left in the stats
hash into "other".
"""

import asyncio
import random
import struct

from aiokafka import AIOKafkaProducer
from prometheus_client.parser import text_string_to_metric_families

from lagwatch.devkit import offsets_encoders as encoders
from lagwatch.devkit.offsets_topic_writer import DEFAULT_PARTITIONS, OFFSETS_TOPIC
from lagwatch.services.api.service import ApiServer
from lagwatch.services.ingest.service import IngestWorker
from lagwatch.shared.protocol import keys
from lagwatch.shared.windows.ingest_totals import read_totals
from tests.kafka_helpers import CLUSTER, eventually, make_config, running

RECORDS = 1000
RECORD_TYPES = {str(t) for t in range(32)} | {"other"}
SKIP_REASONS = {"filtered", "offset_commit_tombstone", "group_deleted", "group_upgraded"}
FIXED_LABELS = {  # family -> (label, every value it may take)
    "lagwatch_ingest_decode_errors": ("type", RECORD_TYPES | {"no-key", "out-of-range", "assignment"}),
    "lagwatch_ingest_skipped_records": (
        "reason",
        RECORD_TYPES | SKIP_REASONS,
    ),
    "lagwatch_ingest_commits": (
        "outcome",
        {"appended", "inserted", "merged", "duplicate", "too_old", "no_broker_offset", "expired", "other"},
    ),
}


def corrupt_records(seed: int, n: int) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) pairs: random bytes, random versions over plausible bodies, good keys with junk values."""
    rng = random.Random(seed)
    good_commit_key = encoders.encode_offset_commit_key("billing", "orders", 0)
    good_group_key = struct.pack(">hh", 2, 7) + b"billing"

    def junk(most: int) -> bytes:
        return rng.randbytes(rng.randint(0, most))

    makers = [
        lambda: (junk(40), junk(80)),
        lambda: (struct.pack(">h", rng.randint(-32768, 32767)) + junk(30), junk(60)),
        lambda: (struct.pack(">h", rng.choice([0, 1, 2])) + junk(20), junk(60)),
        lambda: (good_commit_key, struct.pack(">h", rng.randint(-32768, 32767)) + junk(40)),
        lambda: (good_group_key, struct.pack(">h", rng.randint(-32768, 32767)) + junk(80)),
        lambda: (None, junk(20)),
    ]
    return [rng.choice(makers)() for _ in range(n)]


def label_values(text: str) -> dict[str, set[str]]:
    """Family -> the values its fixed label takes in a Prometheus exposition."""
    found: dict[str, set[str]] = {name: set() for name in FIXED_LABELS}
    for family in text_string_to_metric_families(text):
        if family.name in FIXED_LABELS:
            label = FIXED_LABELS[family.name][0]
            found[family.name] |= {s.labels[label] for s in family.samples if label in s.labels}
    return found


async def scrape(http, url):
    async with http.get(f"{url}/metrics") as response:
        assert response.status == 200
        return await response.text()


async def test_a_thousand_corrupt_records_add_only_fixed_label_values_to_both_metrics(kafka, redis_server, redis, http):
    config = make_config(kafka.bootstrap, redis_server.url)
    # what an older ingest left behind: one field per corrupt record's raw type, and other unknown names
    legacy = {"decode_error:12345": 2, "decode_error:-3": 1, "skipped_type:31337": 4, "outcome:bogus": 1, "odd": 1}
    for name, n in legacy.items():
        await redis.hincrby(keys.ingest_stats(CLUSTER), name, n)
    ingest = IngestWorker(config, CLUSTER, http_port=0)
    async with (
        running(ingest),
        running(ApiServer(config, port=0)) as api,
        AIOKafkaProducer(bootstrap_servers=kafka.bootstrap) as producer,
    ):
        await asyncio.wait_for(api.started.wait(), 10)
        sent = [
            await producer.send(OFFSETS_TOPIC, value, key=key, partition=i % DEFAULT_PARTITIONS)
            for i, (key, value) in enumerate(corrupt_records(18, RECORDS))
        ]
        await asyncio.gather(*sent)
        await eventually(lambda: _records_read(redis, RECORDS), timeout=60)
        assert ingest.consumer is not None and not ingest.stopping.is_set()  # the ingest keeps running

        totals = await read_totals(redis, CLUSTER)
        decoded_errors = sum(n for name, n in totals.items() if name.startswith("decode_error:")) - 3
        assert decoded_errors > RECORDS / 2  # most of them really were corrupt

        for where, url in (("ingest", ingest.health.url), ("api", api.url)):
            found = label_values(await scrape(http, url))
            for family, (_, allowed) in FIXED_LABELS.items():
                assert found[family] <= allowed, (where, family, found[family] - allowed)
        api_found = label_values(await scrape(http, api.url))
        assert "other" in api_found["lagwatch_ingest_decode_errors"]  # the legacy values, folded
        assert "other" in api_found["lagwatch_ingest_commits"]


async def _records_read(redis, n):
    return (await read_totals(redis, CLUSTER)).get("records", 0) >= n

"""`lagwatch forget-cluster NAME`, run as a real subprocess against the real Redis: what Redis keeps of a cluster
removed from the configuration is deleted (its incidents are then the notifiers' to close); refused while the
configuration still names it or its ingest or evaluator still runs; `--dry-run` only counts."""

import asyncio
import json

from lagwatch.services.evaluator.service import EvaluatorService
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime import cluster_forgetting
from lagwatch.shared.runtime.presence import Presence, present
from tests.kafka_helpers import CLUSTER, eventually, make_config, running
from tests.lagwatch.test_cli import lagwatch, one_line_error
from tests.net_helpers import free_port
from tests.shared.runtime.test_cluster_forgetting import cluster_keys, write_cluster


def config_file(tmp_path, redis_url: str, *clusters: str, first: str = "local"):
    """The configuration the services run with: `first` (and `clusters`) on some brokers, the test's Redis."""
    lines = [f"redis: {{url: {json.dumps(redis_url)}}}", "clusters:"]
    lines += [f"  {name}: {{bootstrap-servers: ['127.0.0.1:9092']}}" for name in (first, *clusters)]
    path = tmp_path / "lagwatch.yaml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


async def test_forgets_a_cluster_no_longer_configured_and_keeps_the_others(tmp_path, redis_server, redis):
    await write_cluster(redis, "old", groups=4)
    await write_cluster(redis, "local", groups=2)
    kept, stored = await cluster_keys(redis, "local"), len(await cluster_keys(redis, "old"))

    result = lagwatch("forget-cluster", "old", "--config", config_file(tmp_path, redis_server.url))

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"cluster": "old", "dry_run": False, "groups": 4, "topics": 1, "keys": stored}
    assert await cluster_keys(redis, "old") == [] and await cluster_keys(redis, "local") == kept
    assert await redis.smembers(keys.CLUSTERS) == {b"local"}
    assert list((await cluster_forgetting.forgotten(redis))[0]) == ["old"]  # for the notifiers to close its incidents


async def test_dry_run_counts_and_changes_nothing(tmp_path, redis_server, redis):
    await write_cluster(redis, "old", groups=4)
    before = await cluster_keys(redis, "old")
    result = lagwatch("forget-cluster", "old", "--dry-run", "--config", config_file(tmp_path, redis_server.url))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "cluster": "old",
        "dry_run": True,
        "groups": 4,
        "topics": 1,
        "keys": len(before),
    }
    assert await cluster_keys(redis, "old") == before
    assert await redis.hlen(keys.FORGOTTEN_CLUSTERS) == 0


async def test_refuses_a_cluster_still_configured(tmp_path, redis_server, redis):
    """Its services would write it back at once, and the notifiers would close incidents it still evaluates."""
    await write_cluster(redis, "old")
    result = lagwatch("forget-cluster", "old", "--config", config_file(tmp_path, redis_server.url, "old"))
    assert result.returncode == 2
    assert "cluster 'old' is still configured" in one_line_error(result)
    assert await cluster_keys(redis, "old") != []


async def test_refuses_while_an_ingest_worker_still_polls_the_cluster(tmp_path, redis_server, redis):
    await write_cluster(redis, "old")
    await redis.set(keys.poller_lease("old"), "host-1:4242", px=60_000)
    result = lagwatch("forget-cluster", "old", "--config", config_file(tmp_path, redis_server.url))
    assert result.returncode == 1
    assert "an ingest worker (host-1:4242) still polls cluster 'old'" in one_line_error(result)
    assert await cluster_keys(redis, "old") != []


async def test_refuses_while_an_evaluator_still_runs_for_the_cluster_and_forgets_it_once_stopped(
    tmp_path, kafka, redis_server, redis
):
    """An evaluator left running (on the configuration from before the cluster was taken out) would write its
    statuses, results and counters back as they are deleted, and the cluster would be listed again."""
    kafka.create_topic("lagwatch.changes", 1)
    await write_cluster(redis, CLUSTER)
    without_it = config_file(tmp_path, redis_server.url, first="other")
    evaluator = EvaluatorService(make_config(kafka.bootstrap, redis_server.url), CLUSTER, http_port=0)
    async with running(evaluator):
        assert await eventually(lambda: _running(redis)) == [evaluator.presence.instance]
        result = await asyncio.to_thread(lagwatch, "forget-cluster", CLUSTER, "--config", without_it)
        assert result.returncode == 1
        expected = f"1 evaluator instance ({evaluator.presence.instance}) still running for cluster 'local': stop"
        assert expected in one_line_error(result)
        assert await cluster_keys(redis, CLUSTER) != []
    assert await _running(redis) == []  # withdrawn as it stopped
    result = await asyncio.to_thread(lagwatch, "forget-cluster", CLUSTER, "--config", without_it)
    assert result.returncode == 0, result.stderr
    assert await cluster_keys(redis, CLUSTER) == []


async def test_refuses_while_ingest_workers_that_do_not_poll_still_run(tmp_path, redis_server, redis):
    """Workers besides the poller (`--workers`) write windows too: their presence is enough to refuse."""
    await write_cluster(redis, "old")
    workers = [Presence(redis, "old", "ingest") for _ in range(2)]
    for worker in workers:
        await worker.announce()
    result = lagwatch("forget-cluster", "old", "--config", config_file(tmp_path, redis_server.url))
    assert result.returncode == 1
    assert "2 ingest workers (" in one_line_error(result) and "still running for cluster 'old'" in one_line_error(
        result
    )
    assert await cluster_keys(redis, "old") != []


async def _running(redis) -> list[str]:
    return await present(redis, CLUSTER, "evaluator")


def test_refuses_what_cannot_be_a_cluster_name(tmp_path, redis_server):
    result = lagwatch("forget-cluster", "old*", "--config", config_file(tmp_path, redis_server.url))
    assert result.returncode == 2
    assert "'old*' is not a cluster name" in one_line_error(result)


def test_says_in_one_line_when_redis_does_not_answer(tmp_path):
    result = lagwatch("forget-cluster", "old", "--config", config_file(tmp_path, f"redis://127.0.0.1:{free_port()}/0"))
    assert result.returncode == 1
    assert one_line_error(result).startswith("lagwatch: Redis: ")

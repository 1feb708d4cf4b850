"""The window store on a real three-node Redis Cluster: every script's keys share a slot, and it all works."""

import random
import subprocess
import time

import pytest
from redis.asyncio.cluster import RedisCluster

from lagwatch.devkit.ports import is_free
from lagwatch.devkit.redis_server import RedisServer, find_redis_server
from lagwatch.shared.events.status_event import Incident
from lagwatch.shared.events.status_store import StatusStore
from lagwatch.shared.protocol.types import Commit, Status, WindowConfig
from lagwatch.shared.windows.store import WindowStore
from lagwatch.shared.windows.window import AddOutcome

T0 = (int(time.time()) // 60) * 60_000


def cluster_port() -> int:
    """A free port whose cluster bus port (+10000) is free too; Redis Cluster needs it below 55536."""
    while True:
        port = random.randint(20000, 45000)
        if all(is_free(p) for p in (port, port + 10000)):
            return port


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory):
    servers = []
    for i in range(3):
        server = RedisServer(
            port=cluster_port(),
            dir=tmp_path_factory.mktemp(f"node{i}"),
            extra_args=["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"],
        )
        server.start()
        servers.append(server)
    cli = str(find_redis_server().parent / "redis-cli")
    addresses = [f"127.0.0.1:{s.port}" for s in servers]
    subprocess.run(
        [cli, "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    deadline = time.monotonic() + 30
    while (
        b"cluster_state:ok"
        not in subprocess.run([cli, "-p", str(servers[0].port), "cluster", "info"], capture_output=True).stdout
    ):
        assert time.monotonic() < deadline, "the cluster did not become ready"
        time.sleep(0.2)
    yield f"redis://127.0.0.1:{servers[0].port}/0"
    for server in servers:
        server.close()


async def test_commits_windows_listings_and_deletes_on_a_cluster(redis_cluster):
    client = RedisCluster.from_url(redis_cluster)
    store = WindowStore(client, WindowConfig(intervals=3))
    groups = [f"group-{i}" for i in range(40)]  # spread over all three nodes
    await store.writes.add_broker_offsets("prod", "orders", [100, 100], sampled_at=T0)
    commits = [
        Commit(g, "orders", p, 50 + r, T0 + r, r * 100 + i, T0)
        for r in range(4)
        for i, g in enumerate(groups)
        for p in range(2)
    ]
    outcomes = await store.writes.add_commits("prod", commits, now_ms=T0)
    assert set(outcomes) == {AddOutcome.APPENDED}
    assert await store.reads.list_groups("prod") == sorted(groups)
    stored = await store.reads.get_groups("prod", groups)
    assert all([e.offset for e in p.entries] == [51, 52, 53] for g in stored for p in g.partitions)
    assert await store.deletions.delete_topic("prod", "orders") == 80
    assert await store.deletions.delete_group("prod", "group-7") is True
    assert "group-7" not in await store.reads.list_groups("prod")
    await client.aclose()


async def test_the_evaluators_compare_and_set_on_a_cluster(redis_cluster):
    client = RedisCluster.from_url(redis_cluster)
    statuses = StatusStore(client, 60_000)
    quiet = Incident(None, None)
    assert await statuses.transition("prod", "g", expected_seq=0, status=Status.OK, keeps=quiet, event=b"e1", now_ms=1)
    assert not await statuses.transition(
        "prod", "g", expected_seq=0, status=Status.WARN, keeps=quiet, event=b"e2", now_ms=2
    )
    [state] = await statuses.states("prod", ["g"])
    assert (state.status, state.seq, state.pending) == (Status.OK, 1, [b"e1"])
    await client.aclose()


async def test_each_nodes_memory_policy_is_read(redis_cluster):
    """shared/runtime/redis_memory.py on a cluster: INFO answers per node; one node set to evict is the one said."""
    from lagwatch.shared.runtime.redis_memory import read_memory

    client = RedisCluster.from_url(redis_cluster)
    try:
        nodes = await read_memory(client)
        assert len(nodes) == 3 and not any(node.may_evict for node in nodes)
        first = client.get_nodes()[0]
        await client.config_set("maxmemory", "1gb", target_nodes=first)
        await client.config_set("maxmemory-policy", "allkeys-lru", target_nodes=first)
        try:
            evicting = [node for node in await read_memory(client) if node.may_evict]
            assert [(node.server, node.policy) for node in evicting] == [(first.name, "allkeys-lru")]
        finally:
            await client.config_set("maxmemory", "0", target_nodes=first)
            await client.config_set("maxmemory-policy", "noeviction", target_nodes=first)
    finally:
        await client.aclose()


async def test_a_full_node_makes_the_cluster_take_no_writes(redis_cluster):
    """runtime/redis_memory.takes_writes: the write probe reaches one node; a full primary elsewhere is found by
    its INFO."""
    from lagwatch.shared.runtime.redis_memory import takes_writes

    client = RedisCluster.from_url(redis_cluster)
    try:
        assert await takes_writes(client)
        for node in client.get_primaries():
            used = (await client.info("memory", target_nodes=node))["used_memory"]
            await client.config_set("maxmemory", used // 2, target_nodes=node)
            try:
                assert not await takes_writes(client), node.name
            finally:
                await client.config_set("maxmemory", "0", target_nodes=node)
        assert await takes_writes(client)
    finally:
        await client.aclose()


async def test_forgetting_a_cluster_reaches_every_node(redis_cluster):
    """shared/runtime/cluster_forgetting.py: SCAN on every primary, a delete per key (its own slot)."""
    from lagwatch.shared.protocol import keys
    from lagwatch.shared.runtime import cluster_forgetting
    from tests.shared.runtime.test_cluster_forgetting import write_cluster

    client = RedisCluster.from_url(redis_cluster)
    try:
        await write_cluster(client, "gone", groups=30)
        await write_cluster(client, "kept", groups=2)
        forgotten = await cluster_forgetting.forget(client, "gone", now_ms=T0)
        assert (forgotten.groups, forgotten.topics) == (30, 1)
        assert (await cluster_forgetting.survey(client, "gone")).keys == 0
        assert (await cluster_forgetting.survey(client, "kept")).groups == 2
        listed = await client.smembers(keys.CLUSTERS)  # (the module's other tests write "prod")
        assert b"kept" in listed and b"gone" not in listed
    finally:
        await client.aclose()

"""Several ingest workers, restarts and outages end with exactly the windows one worker alone builds.

Every test reads the same offsets topic twice: once under the circumstance (workers joining and leaving, Redis
restarted, a worker killed), once by a single undisturbed worker of another cluster name (its own consumer group
and Redis keys), and compares the two sets of windows entry by entry (all but the time each was observed).
"""

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from redis.asyncio import Redis

from lagwatch.devkit.offsets_topic_writer import OffsetCommitSpec, OffsetsTopicWriter
from lagwatch.devkit.redis_server import RedisServer
from lagwatch.services.ingest.service import IngestWorker
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import eventually, make_config, produce, running

GROUPS = [f"shop-{i}" for i in range(60)]
TOPIC, PARTITIONS = "orders", 3
ROUNDS = 15  # more than `intervals` (10): rings fill and drop their oldest entries
LOG_END = 1_500  # messages per data-topic partition: above every committed offset


def round_of_commits(r: int, now: int) -> list[OffsetCommitSpec]:
    return [
        OffsetCommitSpec(g, TOPIC, p, r * 100 + p, timestamp=now - (ROUNDS - r) * 1000)
        for g in GROUPS
        for p in range(PARTITIONS)
    ]


def cluster_env(name: str, bootstrap: str) -> dict[str, str]:
    return {f"CLUSTERS__{name}__BOOTSTRAP_SERVERS": bootstrap, f"CLUSTERS__{name}__OFFSET_REFRESH": "0.3"}


async def windows(store: WindowStore, cluster: str) -> dict:
    """{(group, topic, partition): [(offset, timestamp, lag, order, first_order), ...]} of every group written."""
    out = {}
    for group in await store.reads.list_groups(cluster):
        if group not in GROUPS:  # lagwatch's own group
            continue
        stored = await store.reads.get_group(cluster, group)
        for p in stored.partitions if stored else []:
            entries = [(e.offset, e.timestamp, e.lag, e.order, e.first_order) for e in p.entries]
            out[(group, p.topic, p.partition)] = entries
    return out


async def complete(store: WindowStore, cluster: str) -> bool:
    """Every group's every partition holds the last round."""
    got = await windows(store, cluster)
    newest = (ROUNDS - 1) * 100
    return len(got) == len(GROUPS) * PARTITIONS and all(e[-1][0] == newest + p for (_, _, p), e in got.items())


async def alone(bootstrap: str, redis_url: str, redis: Redis) -> dict:
    """The reference: one worker of cluster `alone` reads the whole offsets topic."""
    config = make_config(bootstrap, redis_url, **cluster_env("alone", bootstrap))
    store = WindowStore(redis, config.window())
    async with running(IngestWorker(config, "alone")):
        await eventually(lambda: complete(store, "alone"), timeout=60)
    return await windows(store, "alone")


def worker_process(bootstrap: str, redis_url: str, cluster: str) -> subprocess.Popen:
    env = dict(os.environ, REDIS_URL=redis_url)
    env.update({f"LAGWATCH__{k}": v for k, v in cluster_env(cluster, bootstrap).items()})
    env["LAGWATCH__INGEST__SESSION_TIMEOUT"] = "3"
    lagwatch = Path(sys.executable).parent / "lagwatch"
    command = [str(lagwatch), "run", "ingest", "--cluster", cluster, "--http-port", "0", "--workers", "1"]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> str:
    if proc.poll() is None:
        proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    return out


async def test_workers_joining_and_leaving_mid_stream_build_the_windows_one_worker_builds(kafka, redis_server, redis):
    kafka.create_topic(TOPIC, PARTITIONS)
    await produce(kafka.bootstrap, TOPIC, dict.fromkeys(range(PARTITIONS), 0))
    now = int(time.time() * 1000)
    config = make_config(kafka.bootstrap, redis_server.url, **cluster_env("shared", kafka.bootstrap))
    store = WindowStore(redis, config.window())
    async with OffsetsTopicWriter(kafka.bootstrap) as writer:
        await _log_end(kafka.bootstrap)
        first = IngestWorker(config, "shared")
        async with running(first):
            for r in range(5):
                await writer.commits(round_of_commits(r, now))
            joining = worker_process(kafka.bootstrap, redis_server.url, "shared")  # a second worker joins
            try:
                await eventually(lambda: _true(0 < len(first.consumer.assigned) < 50), timeout=30)
                for r in range(5, 10):
                    await writer.commits(round_of_commits(r, now))
                    await asyncio.sleep(0.2)
            except BaseException:
                stop(joining)
                raise
        # the first worker left (its batches stored and committed); the second takes its partitions over
        try:
            for r in range(10, ROUNDS):
                await writer.commits(round_of_commits(r, now))
            await eventually(lambda: complete(store, "shared"), timeout=60)
        finally:
            out = stop(joining)
        assert joining.returncode == 0, out
    assert await windows(store, "shared") == await alone(kafka.bootstrap, redis_server.url, redis)


async def test_a_redis_restart_and_a_killed_worker_lose_no_commit(kafka, tmp_path, redis_server):
    kafka.create_topic(TOPIC, PARTITIONS)
    await produce(kafka.bootstrap, TOPIC, dict.fromkeys(range(PARTITIONS), 0))
    now = int(time.time() * 1000)
    with RedisServer(dir=tmp_path / "redis", appendonly=True) as server:
        server.start()
        redis = Redis.from_url(server.url)
        store = WindowStore(redis)
        async with OffsetsTopicWriter(kafka.bootstrap) as writer:
            await _log_end(kafka.bootstrap)
            worker = worker_process(kafka.bootstrap, server.url, "outage")
            try:
                for r in range(5):
                    await writer.commits(round_of_commits(r, now))
                await eventually(lambda: _has_round(store, "outage", 4), timeout=60)
                server.stop()  # Redis gone while commits keep coming
                for r in range(5, 10):
                    await writer.commits(round_of_commits(r, now))
                await asyncio.sleep(1.0)
                server.start()
                await eventually(lambda: _has_round(store, "outage", 9), timeout=60)
                worker.send_signal(signal.SIGKILL)  # killed mid-stream: nothing flushed, nothing committed
                worker.communicate(timeout=30)
                for r in range(10, ROUNDS):
                    await writer.commits(round_of_commits(r, now))
                worker = worker_process(kafka.bootstrap, server.url, "outage")
                await eventually(lambda: complete(store, "outage"), timeout=60)
            finally:
                stop(worker)
        assert await windows(store, "outage") == await alone(kafka.bootstrap, server.url, redis)
        await redis.aclose()


async def _log_end(bootstrap: str) -> None:
    """The data topic's log end, above every commit and fixed from now on (the same lag in every run)."""
    await produce(bootstrap, TOPIC, dict.fromkeys(range(PARTITIONS), LOG_END))


async def _has_round(store: WindowStore, cluster: str, r: int) -> bool:
    got = await windows(store, cluster)
    return len(got) == len(GROUPS) * PARTITIONS and all(e[-1][0] >= r * 100 for e in got.values())


async def _true(value: object) -> bool:
    return bool(value)


async def test_run_ingest_with_two_workers_shares_the_topic_and_stops_or_dies_with_its_supervisor(
    kafka, redis_server, tmp_path
):
    env = dict(os.environ, REDIS_URL=redis_server.url, KAFKA_BOOTSTRAP_SERVERS=kafka.bootstrap)
    env["LAGWATCH__INGEST__SESSION_TIMEOUT"] = "3"
    lagwatch = Path(sys.executable).parent / "lagwatch"
    for ending in (signal.SIGTERM, signal.SIGKILL):
        log = tmp_path / f"ingest-{ending}.log"
        supervisor = subprocess.Popen(
            [str(lagwatch), "run", "ingest", "--workers", "2", "--http-port", "0", "--log-file", str(log)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            children = await eventually(lambda s=supervisor: _children(s.pid, 2), timeout=20)
            await eventually(lambda c=children, f=log: _split_between(c, f), timeout=30)
            supervisor.send_signal(ending)
            out, _ = supervisor.communicate(timeout=60)
            if ending == signal.SIGTERM:
                assert supervisor.returncode == 0, out
            gone = await eventually(lambda c=children: _all_gone(c), timeout=30)
            assert gone, out
        finally:
            if supervisor.poll() is None:
                supervisor.kill()
            _kill_left_workers(supervisor.pid)


def _kill_left_workers(supervisor: int) -> None:
    """Kill any worker a failed run left behind; other children (even zombies of other tests) are left alone."""
    import psutil

    for child in psutil.Process().children(recursive=True):
        try:
            if child.pid != supervisor and "run ingest" in " ".join(child.cmdline()):
                child.kill()
        except psutil.Error:  # gone or a zombie since it was listed: nothing to kill
            continue


async def _children(pid: int, n: int):
    import psutil

    children = psutil.Process(pid).children()
    return children if len(children) == n else None


async def _split_between(children, log: Path) -> bool:
    """The two workers hold half of the offsets topic each (their latest assignments, as they logged them)."""
    for child in children:
        if not child.is_running():
            raise AssertionError(f"worker {child.pid} died")
    text = log.read_text() if log.exists() else ""
    lines = [line for line in text.splitlines() if "assigned offsets-topic partitions" in line]
    halves = [line.rpartition("[")[2].rstrip("]").split(", ") for line in lines[-2:]]
    return len(lines) >= 2 and all(len(h) == 25 for h in halves) and not set(halves[0]) & set(halves[1])


async def _all_gone(children) -> bool:
    import psutil

    def gone(child: psutil.Process) -> bool:
        try:
            return not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:  # reaped between the two questions
            return True

    return all(gone(c) for c in children)


def test_the_default_leaves_a_core_for_redis_and_the_kafka_clients_threads(monkeypatch):
    from lagwatch.services.ingest import workers

    for cpus, expected in ((1, 1), (2, 1), (4, 3), (16, 15)):
        monkeypatch.setattr(workers, "available_cpus", lambda cpus=cpus: cpus)
        assert workers.default_workers() == expected


def test_a_containers_cpu_limit_caps_the_cpus_counted(tmp_path, monkeypatch):
    """cgroup v2 `cpu.max`, then v1's quota and period; no limit (or none readable) leaves the CPUs as they are."""
    from lagwatch.services.ingest import workers

    v2, v1, none = tmp_path / "v2", tmp_path / "v1" / "cpu", tmp_path / "none"
    for d in (v2, v1, none):
        d.mkdir(parents=True)
    (v2 / "cpu.max").write_text("150000 100000\n")
    (v1 / "cpu.cfs_quota_us").write_text("200000\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    assert workers.cgroup_cpu_limit(v2) == 1.5
    assert workers.cgroup_cpu_limit(tmp_path / "v1") == 2.0
    assert workers.cgroup_cpu_limit(none) is None
    (v2 / "cpu.max").write_text("max 100000\n")
    assert workers.cgroup_cpu_limit(v2) is None
    for malformed in ("100000 0\n", "-1 100000\n", "lots\n"):  # read as no limit, never a crash at start
        (v2 / "cpu.max").write_text(malformed)
        assert workers.cgroup_cpu_limit(v2) is None

    monkeypatch.setattr(workers.os, "sched_getaffinity", lambda pid: set(range(64)))
    monkeypatch.setattr(workers, "CGROUP_ROOT", tmp_path / "v1")
    assert workers.available_cpus() == 2  # a pod limited to 2 CPUs on a 64-CPU node
    assert workers.default_workers() == 1
    monkeypatch.setattr(workers, "CGROUP_ROOT", none)
    assert workers.available_cpus() == 64


GIVE_BACK_PROBE = """
import ctypes
from lagwatch.services.ingest import workers
from lagwatch.shared.runtime.heap import give_back_free_memory

def rss_kb():
    return int(next(line for line in open("/proc/self/status") if line.startswith("VmRSS")).split()[1])

workers.tune_malloc()
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes, libc.memset.argtypes = [ctypes.c_void_p], [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
blocks = [libc.malloc(1 << 20) for _ in range(200)]  # under the mmap threshold: from the heap
for block in blocks:
    libc.memset(block, 1, 1 << 20)
for block in blocks[:-1]:  # the last one stays, at the heap's top: glibc trims nothing by itself
    libc.free(block)
before = rss_kb()
give_back_free_memory()
print(before, rss_kb())
"""


def test_freed_heap_memory_goes_back_to_the_system_when_asked():
    out = subprocess.run([sys.executable, "-c", GIVE_BACK_PROBE], capture_output=True, text=True, check=True)
    before, after = (int(x) for x in out.stdout.split())
    assert before - after > 150_000  # kB: most of the 199 MB freed

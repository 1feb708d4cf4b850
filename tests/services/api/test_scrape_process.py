"""The api's scrape worker process (services/api/scrape_process.py): the body comes back through a file that is
gone once the api has it open, and nothing is left behind when the worker closes."""

import asyncio
import io
import json
import os
import pickle
import tempfile

import psutil
import pytest

from lagwatch.services.api.scrape_process import ScrapeWorker, WorkerDied
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.clock import now_ms
from tests.kafka_helpers import eventually
from tests.services.api.test_api import api_config, seed


async def scrape(worker: ScrapeWorker):
    """One scrape's body as the api takes it (shared_render.py): an open file, already unlinked."""
    path = await worker.render()
    body = open(path, "rb")  # noqa: SIM115 - the caller reads and closes it
    os.unlink(path)
    return body


async def test_a_scrape_comes_back_through_a_file_that_is_already_gone(redis_server, redis):
    await seed(redis, now_ms())
    config = api_config(redis_server.url)
    worker = ScrapeWorker(config)
    try:
        for _ in range(2):  # the second from what the worker process kept
            with await scrape(worker) as body:
                text = body.read()
                assert os.listdir(worker._dir) == []  # unlinked: closing the file frees it
            assert b'burrow_kafka_consumer_status{cluster="local",consumer_group="billing"} 3' in text
        directories = [worker._dir, worker._spool_dir]
        assert os.listdir(worker._spool_dir)  # the lines the next scrape may reuse, on disk
    finally:
        await worker.close()
    assert not any(os.path.exists(d) for d in directories)


async def test_a_scrape_given_up_on_leaves_no_body_behind_once_the_worker_has_written_it(redis_server, redis):
    """A scrape over `api.request-timeout` (or whose client left) is cancelled while the worker still renders it:
    the body it writes afterwards (58 MB at 100k partitions, in RAM under /dev/shm) must not stay there."""
    await seed(redis, now_ms())
    worker = ScrapeWorker(api_config(redis_server.url))
    try:
        with pytest.raises(TimeoutError):  # the worker process is still starting: the scrape cannot be this quick
            await asyncio.wait_for(scrape(worker), 0.001)
        with await scrape(worker):  # queued behind the abandoned one: that one has written its file by now
            pass

        async def no_body_left() -> bool:
            return os.listdir(worker._dir) == []

        await eventually(no_body_left, timeout=10)
    finally:
        await worker.close()


async def test_a_quiet_groups_lines_are_reused_from_disk_until_its_log_ends_move(redis_server, redis):
    """`audit` is caught up and steady: its lines are spooled at the first scrape and copied from there at the next;
    a new log end of its partition renders them again."""
    now = now_ms()
    store = await seed(redis, now)
    worker = ScrapeWorker(api_config(redis_server.url))
    audit_lag = b'burrow_kafka_consumer_lag_total{cluster="local",consumer_group="audit"} '
    try:
        bodies = []
        for _ in range(2):
            with await scrape(worker) as body:
                bodies.append(body.read())
        assert all(audit_lag + b"0\n" in body for body in bodies)
        assert [b for b in bodies[0].splitlines() if b"audit" in b] == [
            b for b in bodies[1].splitlines() if b"audit" in b
        ]
        await store.writes.add_broker_offsets("local", "orders", [100, 200, 350], sampled_at=now + 1000)
        with await scrape(worker) as body:
            moved = body.read()
        assert audit_lag + b"50\n" in moved
        assert b'burrow_kafka_topic_partition_offset{cluster="local",topic="orders",partition="2"} 350\n' in moved
        key = keys.group_results("local")  # a result rewritten, the log ends as they were: rendered again
        stored = json.loads(await redis.hget(key, "audit"))
        await redis.hset(key, "audit", json.dumps([2, *stored[1:]]))
        with await scrape(worker) as body:
            assert b'burrow_kafka_consumer_status{cluster="local",consumer_group="audit"} 2\n' in body.read()
    finally:
        await worker.close()


async def test_the_scrape_runs_in_one_child_process_without_the_web_server_and_a_killed_one_is_replaced(
    redis_server, redis
):
    """The worker is the api's only child (no pool's resource tracker beside it) and has not loaded aiohttp (its
    memory is what rendering needs); killed, the scrape that finds it gone fails and the next one starts another."""
    await seed(redis, now_ms())
    worker, already = ScrapeWorker(api_config(redis_server.url)), set(psutil.Process().children(recursive=True))
    try:
        with await scrape(worker):
            pass
        [child] = set(psutil.Process().children(recursive=True)) - already
        assert not [m.path for m in child.memory_maps() if "aiohttp" in m.path]
        child.kill()
        child.wait(10)
        with pytest.raises(WorkerDied):
            await scrape(worker)
        with await scrape(worker) as body:
            assert b'consumer_group="billing"' in body.read()
        [replaced] = set(psutil.Process().children(recursive=True)) - already
        assert replaced.pid != child.pid
    finally:
        await worker.close()
    assert set(psutil.Process().children(recursive=True)) == already  # closed: the worker is gone too


def test_the_results_a_render_is_kept_for_are_told_apart_by_their_fingerprint():
    from lagwatch.services.api.metrics import fingerprint

    results = {b"a": b"[1]", b"b": b"[2]"}
    assert fingerprint(results) == fingerprint({b"b": b"[2]", b"a": b"[1]"})  # whatever the order Redis gives
    for changed in (
        {b"a": b"[1]", b"b": b"[3]"},
        {b"a": b"[2]", b"b": b"[1]"},
        {b"a": b"[1]"},
        {b"a": b"[1]", b"c": b"[2]"},
    ):
        assert fingerprint(changed) != fingerprint(results), changed


def test_the_log_ends_a_render_is_kept_for_are_told_apart_by_their_fingerprint():
    from lagwatch.services.api.metrics import ends_fingerprint

    ends = {("t", 0): 10, ("t", 1): 20}
    assert ends_fingerprint(ends) == ends_fingerprint({("t", 1): 20, ("t", 0): 10})
    for changed in (
        {("t", 0): 20, ("t", 1): 10},
        {("t", 0): 10},
        {("t", 0): 10, ("t", 1): 21},
        {("u", 0): 10, ("t", 1): 20},
    ):
        assert ends_fingerprint(changed) != ends_fingerprint(ends), changed


async def test_a_lagging_groups_lines_are_reused_with_only_their_values_on_the_clock_rendered_again(
    redis_server, redis, monkeypatch
):
    """`billing` lags and started a generation: its lag in seconds and its rebalances of the last hour move with the
    clock. A later scrape of the same results and log ends decodes no result again (its other lines come from the
    spool, those values from their clock inputs) and reads as a render from nothing at that time."""
    from lagwatch.services.api import metrics

    now = now_ms()
    await seed(redis, now)
    config = api_config(redis_server.url)
    clock, decoded = [now], []
    monkeypatch.setattr(metrics, "now_ms", lambda: clock[0])
    render = metrics.RenderedGroups._render
    monkeypatch.setattr(metrics.RenderedGroups, "_render", lambda self, *a: decoded.append(a[1]) or render(self, *a))
    spool = tempfile.mkdtemp()
    bodies = []
    for at in (now, now + 2 * metrics.HOUR_MS):  # the generation's start leaves the last hour
        clock[0] = at
        with tempfile.TemporaryFile() as out:
            await metrics.scrape_into(config, redis, out, spool)
            out.seek(0)
            bodies.append(without_redis_memory(out.read()))
        if at == now:
            assert sorted(decoded) == ["audit", "billing"]
    assert sorted(decoded) == ["audit", "billing"]  # not again at the second scrape
    metrics._RENDERED.pop(spool)
    assert bodies[1] == without_redis_memory(await metrics.scrape_results(config, redis))
    rebalances = b'lagwatch_group_rebalances_last_hour{cluster="local",consumer_group="billing"} '
    assert rebalances + b"1\n" in bodies[0] and rebalances + b"0\n" in bodies[1]
    seconds = [line for line in bodies[1].splitlines() if line.startswith(b"lagwatch_consumer_lag_seconds{")]
    assert seconds and all(line not in bodies[0] for line in seconds if b"billing" in line)


def without_redis_memory(body: bytes) -> bytes:
    """The body without Redis's used memory (it changes between two reads)."""
    return b"\n".join(line for line in body.splitlines() if not line.startswith(b"lagwatch_redis_memory_used"))


async def test_a_cluster_read_one_result_at_a_time_is_fingerprinted_and_rendered_as_read_whole(
    redis_server, redis, monkeypatch
):
    """The scrape process reads the stored results a slice at a time (twice when it renders: once for their
    fingerprint, once to render them): the same fingerprint and the same body as from the whole hash at once."""
    from lagwatch.services.api import metrics

    now = now_ms()
    await seed(redis, now)
    config = api_config(redis_server.url)
    monkeypatch.setattr(metrics, "now_ms", lambda: now)
    whole = without_redis_memory(await metrics.scrape_results(config, redis))
    stored = await redis.hgetall(keys.group_results("local"))
    monkeypatch.setattr(metrics, "RESULTS_PER_READ", 1)
    assert len(stored) > 1 and await metrics.StoredResults(redis, "local").fingerprint() == metrics.fingerprint(stored)
    assert without_redis_memory(await metrics.scrape_results(config, redis)) == whole


class Unpicklable(Exception):
    def __reduce__(self):
        raise TypeError("not picklable")


def test_a_failed_scrape_answers_its_exception_and_the_worker_serves_on(monkeypatch, tmp_path):
    """The worker's answers through its pipe: an exception travels as itself (the api's 503 for Redis being down
    depends on its type), one that does not pickle as its text; the worker ends when the api closes its end."""
    from lagwatch.services.api import scrape_process

    failures = iter([ConnectionRefusedError(111, "refused"), Unpicklable("odd")])

    def failing(*_):
        raise next(failures)

    monkeypatch.setattr(scrape_process, "scrape_in_worker", failing)
    requests = io.BytesIO()
    for message in (api_config("redis://127.0.0.1:1"), (str(tmp_path / "a"), str(tmp_path)), ("b", str(tmp_path))):
        data = pickle.dumps(message)
        requests.write(scrape_process.FRAME.pack(len(data)) + data)
    requests.seek(0)
    answers = io.BytesIO()
    scrape_process.serve(requests, answers)  # returns: the requests ended
    answers.seek(0)
    (refused_status, refused), (odd_status, odd) = scrape_process._read(answers), scrape_process._read(answers)
    assert (refused_status, type(refused), refused.errno) == ("error", ConnectionRefusedError, 111)
    assert (odd_status, type(odd), str(odd)) == ("error", RuntimeError, "Unpicklable('odd')")
    assert scrape_process._read(answers) is None

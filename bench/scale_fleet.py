"""`bench_scale.py --ingest`: the whole fleet from the offsets topic, beside Burrow reading the same records.

Setup per size: the Kafka mock in its own process; G groups x 4 partitions of one data topic (`bench-data`, log ends
above every commit), two commits per group partition, written in coordinator format to a 50-partition
`__consumer_offsets` (`bench_vs_burrow.write_records`: 25k groups = 100k partitions, 250k = 1M). One topic, not the
seeded mode's 25 groups a topic: the mock took minutes to take the log ends of 10k topics' 40k partitions. Then,
from a cold, empty redis-server, `lagwatch run ingest` and `lagwatch run evaluator` start together (session timeout
3 s, as in `bench_vs_burrow.py`: the mock holds a join for a session timeout). Printed, after the load average as the
lagwatch side starts (the machine may be shared):

* cold start: seconds until every group has a ready result (its first status, the ingest's reading included), and
  until the ingest stored every record (its stored-records counter in Redis), with its records/s; each process's
  resident memory then;
* idle CPU (% of one core over `IDLE_S`) of the evaluator, redis-server and the ingest (its processes), and the
  Redis commands that took most of redis-server's time meanwhile;
* STOP delay p50/p99 of `bench_scale.PROBES` probe groups (`bench_scale.stop_delays`);
* `/metrics` with partition-level series on and off (`api.metrics-partition-series`, one api each): the first
  scrape's seconds, then the median of two more, bytes, samples; the api's peak resident memory during the scrapes
  with its children (the scrape process), sampled every `RSS_EVERY_S` (VmRSS summed over the tree) and the
  children's high-water mark (VmHWM); the peak of every lagwatch process together (ingest, evaluator, api and its
  children, redis-server) during the scrapes, and each one's high-water mark since it started;
* `GET /v3/kafka/<cluster>/consumer` and the dashboard's first page (`/dashboard`, then its first data request,
  `/dashboard/api/overview?cluster=<cluster>`, and their sum): seconds;
* SIGKILL of the evaluator with `bench_scale.RESTART_PROBES` STOPs due while none runs, then a new one: seconds to
  the first and last of those STOPs and to every group evaluated again (`bench_scale.restart_delays`);
* SIGTERM in the middle of a full evaluation: a new evaluator after a clean stop evaluates every group again (its
  takeover); once it has done `SIGTERM_AT` of them it gets SIGTERM: seconds until it exits, beside the bound its stop
  is given (`STOP_TIMEOUT_S`, the Faust app's stop);
* Burrow 1.2.1 on the same records (`bench_vs_burrow.run_burrow`, on its own ZooKeeper): seconds until the newest
  commit of every offsets partition is visible, records/s, peak RSS alone and with ZooKeeper; the ratios of
  records/s and of resident memory (lagwatch's every process during a scrape over Burrow's peak).

A Burrow that is not installed or fails is reported and lagwatch's figures still print; `--no-burrow` skips it.
`--evaluators N` starts N evaluator instances together (as a deployment would on N cores): they share the cold start
and count in the idle and memory figures, then all but one stop before the restart and SIGTERM measures.
Logs go to `LOG_DIR` (not the seeded mode's files).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from bench_scale import (
    CLUSTER,
    IDLE_S,
    PARTITIONS,
    PROBE_TOPIC,
    lagwatch_process,
    percentile,
    restart_delays,
    scrape,
    stop_delays,
)
from bench_vs_burrow import (
    DATA_TOPIC,
    BenchError,
    Row,
    Shape,
    burrow_available,
    check_retention,
    lagwatch_bin,
    run_burrow,
    spawn,
    start_api,
    stop_group,
    write_records,
    zookeeper,
)
from confluent_kafka import Producer
from redis import Redis

from lagwatch.devkit.mock_kafka import MockKafkaControl, start_mock_kafka_process, stop_process
from lagwatch.devkit.offsets_topic_writer import DEFAULT_PARTITIONS, OFFSETS_TOPIC
from lagwatch.devkit.redis_server import RedisServer
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.faust_kafka import STOP_TIMEOUT_S

COMMITS = 2
GROUP_PREFIX = b"bench-group-"  # write_records' group names
LOG_DIR = Path(tempfile.gettempdir()) / "lagwatch-bench-scale-fleet"
RSS_EVERY_S = 0.075
SIGTERM_AT = 0.3  # of the groups evaluated again by the new evaluator
COLD_TIMEOUT_S = 900.0
BURROW_ATTEMPTS = 3
PROBE_LOG_END = 1100  # the log end the probes' seeded polls claim (bench_scale.seed_probes)


def run(
    groups: int, *, burrow: bool = True, idle_s: float = IDLE_S, lead_s: float = 5.0, evaluators: int = 1
) -> dict[str, Any]:
    """Every figure of one size, lagwatch's first, then Burrow's on the same records. `lead_s`: how far ahead the
    STOP probes' first instant is (the restart probes' twice that: the old evaluator schedules them first).
    `evaluators`: instances started together for the cold start (they share `lagwatch.changes`'s partitions); the
    others stop cleanly after the scrapes, before the restart and SIGTERM measures, which are about one instance."""
    shape = Shape("fleet", groups, PARTITIONS, COMMITS)
    out: dict[str, Any] = {"partitions": groups * PARTITIONS, "groups": groups, "records": shape.records}
    out["evaluators"] = evaluators
    LOG_DIR.mkdir(exist_ok=True)
    topics = {OFFSETS_TOPIC: DEFAULT_PARTITIONS, DATA_TOPIC: PARTITIONS, "lagwatch.changes": 4, "lagwatch.status": 4}
    topics[PROBE_TOPIC] = 1
    with tempfile.TemporaryDirectory(prefix="bench-scale-fleet-") as tmp_name:
        tmp = Path(tmp_name)
        kafka, control = start_mock_kafka_process(tmp / "kafka", topics)
        try:
            sentinels, writing = write_records(control.bootstrap, shape)
            fill_probe_topic(control.bootstrap)
            check_retention(control.bootstrap, shape.records)
            out["write_records_s"] = round(writing, 1)
            out["load_1m_at_start"] = round(os.getloadavg()[0], 1)  # the machine is shared: how busy it was
            out |= lagwatch_side(control, shape, idle_s, lead_s, evaluators)
            if burrow:
                out |= burrow_side(control, sentinels, shape.records, tmp, kafka.pid)
            else:
                out["burrow"] = "skipped (--no-burrow)"
        finally:
            stop_process(kafka)
    return out | ratios(out)


def fill_probe_topic(bootstrap: str) -> None:
    """The probe groups' topic exists, with its log end past their commits: the ingest's poller forgets the
    partitions of a topic Kafka does not have (deleted), and a log end at their commits would make them caught up."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for i in range(PROBE_LOG_END):
        producer.produce(PROBE_TOPIC, value=b"%d" % i, partition=0)
    if producer.flush(30):
        raise BenchError(f"{PROBE_TOPIC}: records not acknowledged")


def lagwatch_side(
    control: MockKafkaControl, shape: Shape, idle_s: float, lead_s: float, evaluators: int = 1
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with RedisServer() as redis, contextlib.ExitStack() as stack:
        redis.start()
        env = dict(os.environ, REDIS_URL=redis.url, KAFKA_BOOTSTRAP_SERVERS=control.bootstrap)
        env |= {"LAGWATCH__INGEST__SESSION_TIMEOUT": "3", "BENCH_SCALE_LOG_DIR": str(LOG_DIR)}
        started = time.perf_counter()
        ingest = start_ingest(env)
        stack.callback(stop_group, ingest)
        evaluator = lagwatch_process("evaluator", env)
        running = [evaluator]  # the evaluator now running, stopped on the way out whichever it is
        stack.callback(lambda: stop_process(running[-1], timeout=30))
        others = [lagwatch_process("evaluator", env) for _ in range(evaluators - 1)]
        stack.callback(lambda: [stop_process(other, timeout=30) for other in others])
        out |= cold_start(redis.url, shape, started)
        time.sleep(3)  # the last evaluations' writes settle
        roots = {"evaluator": evaluator.pid, "redis-server": redis.pid, "ingest": ingest.pid}
        roots |= {f"evaluator-{i + 2}": other.pid for i, other in enumerate(others)}
        out["rss_at_cold_start_mb"] = {label: rss_mb(tree(pid)) for label, pid in roots.items()}
        out |= idle_cpu(roots, idle_s, redis.url)
        delays = asyncio.run(stop_delays(control.bootstrap, redis.url, lead_s))
        out["stop_delay_p50_s"] = round(statistics.median(delays), 3)
        out["stop_delay_p99_s"] = round(percentile(delays, 0.99), 3)
        for partition_series in (True, False):
            out |= api_figures(env, roots, partition_series)
        for other in others:
            stop_process(other, timeout=30)
        restarted, figures = asyncio.run(
            restart_delays(env, redis.url, control.bootstrap, shape.groups, lambda: kill(evaluator), int(2000 * lead_s))
        )
        running.append(restarted)
        out |= {f"sigkill_{name}": value for name, value in figures.items()}
        out |= sigterm_mid_evaluation(env, redis.url, shape.groups, restarted, running)
    return out


def start_ingest(env: dict[str, str]) -> subprocess.Popen:
    """`lagwatch run ingest` in its own process group (its workers are processes too)."""
    log = LOG_DIR / "lagwatch-bench-scale-ingest.log"
    command = [str(lagwatch_bin()), "run", "ingest", "--http-port", "0", "--log-level", "INFO", "--log-file", str(log)]
    return spawn(command, LOG_DIR / "ingest.out", env=env)


def kill(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


def cold_start(redis_url: str, shape: Shape, started: float) -> dict[str, Any]:
    """Seconds from `started` until every group has a ready result, until the ingest stored every record, and until
    every group also has its sparkline (drawn after the statuses: the idle measurement starts after that)."""
    redis = Redis.from_url(redis_url)
    results, stats = keys.group_results(CLUSTER), keys.ingest_stats(CLUSTER)
    lines = keys.group_sparklines(CLUSTER)
    out: dict[str, Any] = {}
    try:
        while time.perf_counter() - started < COLD_TIMEOUT_S:
            now = time.perf_counter() - started
            if "ingest_stored_s" not in out and int(redis.hget(stats, "records") or 0) >= shape.records:
                out["ingest_stored_s"] = round(now, 1)
                out["ingest_records_per_s"] = round(shape.records / now)
            # lagwatch's own group (`lagwatch-<cluster>`) has a result too: only the bench's groups count
            if "cold_start_s" not in out and every_group_ready(redis, results, shape.groups):
                out["cold_start_s"] = round(now, 1)
                out["cold_start_evaluations"] = evaluations(redis)
            if (
                "cold_start_s" in out
                and "cold_start_sparklines_s" not in out
                and every_group_ready(redis, lines, shape.groups)
            ):
                out["cold_start_sparklines_s"] = round(now, 1)
            if len(out) == 5:
                return out
            time.sleep(0.2)
    finally:
        redis.close()
    raise BenchError(f"cold start not done within {COLD_TIMEOUT_S:.0f} s: {out}")


def evaluations(redis: Redis) -> dict[str, Any]:
    """The evaluator's work so far by trigger (groups evaluated), and the seconds it spent evaluating: a cold start
    that evaluates a group more than once while the ingest reads shows here."""
    stats = {k.decode(): v.decode() for k, v in redis.hgetall(keys.evaluator_stats(CLUSTER)).items()}
    out: dict[str, Any] = {k.split(":", 1)[1]: int(v) for k, v in stats.items() if k.startswith("evaluations:")}
    out["seconds"] = round(float(stats.get("evaluation_seconds", 0)), 1)
    return out


def every_group_ready(redis: Redis, key: str, groups: int) -> bool:
    """Every bench group has a field in the hash `key` (results or sparklines)."""
    if redis.hlen(key) < groups:
        return False
    found = sum(1 for name in redis.hscan_iter(key, match=GROUP_PREFIX + b"*", count=10_000))
    return found >= groups


def tree(pid: int) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    return []


def tree_cpu(pid: int) -> float:
    total = 0.0
    for proc in tree(pid):
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


def idle_cpu(roots: dict[str, int], seconds: float, redis_url: str) -> dict[str, Any]:
    """% of one core each process tree used over `seconds` with nothing changing, and their sum; and the Redis
    commands that took the most of redis-server's time meanwhile (calls, ms): what its idle share is made of."""
    before = {label: tree_cpu(pid) for label, pid in roots.items()}
    stats_before = command_stats(redis_url)
    time.sleep(seconds)
    stats = command_stats(redis_url)
    out: dict[str, Any] = {
        f"idle_cpu_{label}_pct": round((tree_cpu(pid) - before[label]) / seconds * 100, 2)
        for label, pid in roots.items()
    }
    out["idle_cpu_total_pct"] = round(sum(out.values()), 2)
    zero = (0, 0)
    spent = {
        name: (n - stats_before.get(name, zero)[0], us - stats_before.get(name, zero)[1])
        for name, (n, us) in stats.items()
    }
    top = sorted(spent.items(), key=lambda item: -item[1][1])[:4]
    out["idle_redis_top_commands"] = ", ".join(
        f"{name} {calls} calls {usec / 1000:.0f} ms" for name, (calls, usec) in top
    )
    return out


def command_stats(redis_url: str) -> dict[str, tuple[int, int]]:
    """Redis's per-command totals since its start: name -> (calls, microseconds)."""
    redis = Redis.from_url(redis_url)
    try:
        return {
            name.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
            for name, v in redis.info("commandstats").items()
        }
    finally:
        redis.close()


class RssSampler:
    """Resident memory of process trees, sampled every `RSS_EVERY_S` in a thread: the peak of each tree's sum, and
    of all trees' sum in one sample."""

    def __init__(self, roots: dict[str, int]) -> None:
        self.roots = roots
        self.peaks = dict.fromkeys(roots, 0)
        self.total_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.sample()

    def _loop(self) -> None:
        while not self._stop.wait(RSS_EVERY_S):
            self.sample()

    def sample(self) -> None:
        total = 0
        for label, pid in self.roots.items():
            rss = 0
            for proc in tree(pid):
                with contextlib.suppress(psutil.Error):
                    rss += proc.memory_info().rss
            self.peaks[label] = max(self.peaks[label], rss)
            total += rss
        self.total_peak = max(self.total_peak, total)


def rss_mb(processes: list[psutil.Process]) -> int:
    total = 0
    for proc in processes:
        with contextlib.suppress(psutil.Error):
            total += proc.memory_info().rss
    return round(total / 2**20)


def hwm_mb(processes: list[psutil.Process]) -> int:
    """The high-water mark of the resident memory of each process (VmHWM), summed: peaks between samples count."""
    total = 0
    for proc in processes:
        with contextlib.suppress(OSError, psutil.Error):
            status = Path(f"/proc/{proc.pid}/status").read_text()
            total += next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")) * 1024
    return round(total / 2**20)


def api_figures(env: dict[str, str], roots: dict[str, int], partition_series: bool) -> dict[str, Any]:
    """One api with partition-level series on or off: its scrapes and memory; the consumer list and the dashboard
    with them on (the default)."""
    tag = "partitions_on" if partition_series else "partitions_off"
    api_env = env | {"LAGWATCH__API__METRICS_PARTITION_SERIES": str(partition_series).lower()}
    api, base = start_api(api_env, LOG_DIR / f"api-{tag}.log")
    out: dict[str, Any] = {}
    try:
        with RssSampler({**roots, "api": api.pid}) as sampler:
            first = asyncio.run(scrape(f"{base}/metrics"))
            later = [asyncio.run(scrape(f"{base}/metrics")) for _ in range(2)]
        out[f"metrics_{tag}_first_s"] = round(first[0], 2)
        out[f"metrics_{tag}_s"] = round(statistics.median(r[0] for r in later), 2)
        out[f"metrics_{tag}_mb"] = round(first[1] / 1e6, 1)
        out[f"metrics_{tag}_samples"] = first[2]
        out[f"api_{tag}_peak_rss_mb"] = round(sampler.peaks["api"] / 2**20)
        out[f"api_{tag}_children_hwm_mb"] = hwm_mb(tree(api.pid)[1:])  # the scrape process
        out[f"lagwatch_{tag}_rss_mb"] = {label: round(peak / 2**20) for label, peak in sampler.peaks.items()}
        out[f"lagwatch_{tag}_total_peak_rss_mb"] = round(sampler.total_peak / 2**20)
        out[f"lagwatch_{tag}_hwm_mb"] = {label: hwm_mb(tree(pid)) for label, pid in sampler.roots.items()}
        if partition_series:
            out |= page_seconds(base)
    finally:
        stop_group(api)
    return out


def page_seconds(base: str) -> dict[str, float]:
    """Seconds of the consumer list and of the dashboard's page and first data request, each read whole."""
    pages = {
        "consumer_list_s": f"{base}/v3/kafka/{CLUSTER}/consumer",
        "dashboard_html_s": f"{base}/dashboard",
        "dashboard_overview_s": f"{base}/dashboard/api/overview?cluster={CLUSTER}",
    }
    out = {name: round(timed(lambda url=url: fetch(url)), 3) for name, url in pages.items()}
    out["dashboard_first_page_s"] = round(out["dashboard_html_s"] + out["dashboard_overview_s"], 3)
    return out


def fetch(url: str) -> None:
    with urllib.request.urlopen(url, timeout=120) as response:
        if response.status != 200:
            raise BenchError(f"{url}: HTTP {response.status}")
        response.read()


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def sigterm_mid_evaluation(
    env: dict[str, str], redis_url: str, groups: int, previous: subprocess.Popen, running: list[subprocess.Popen]
) -> dict[str, Any]:
    """`previous` stops cleanly; a new evaluator evaluates every group again and gets SIGTERM once it did
    `SIGTERM_AT` of them: seconds until it exits."""
    out: dict[str, Any] = {"sigterm_idle_exit_s": round(timed(lambda: stop_process(previous, timeout=60)), 2)}
    redis = Redis.from_url(redis_url)
    stats = keys.evaluator_stats(CLUSTER)
    try:
        done_before = int(redis.hget(stats, "evaluations:takeover") or 0)
        evaluator = lagwatch_process("evaluator", env)
        running.append(evaluator)
        deadline = time.monotonic() + COLD_TIMEOUT_S
        done = 0
        while done < SIGTERM_AT * groups and time.monotonic() < deadline and evaluator.poll() is None:
            time.sleep(0.05)
            done = int(redis.hget(stats, "evaluations:takeover") or 0) - done_before
    finally:
        redis.close()
    out["sigterm_at_evaluated_pct"] = round(100 * done / groups, 1)
    out["sigterm_exit_s"] = round(timed(lambda: stop_process(evaluator, timeout=120)), 2)
    out["sigterm_exit_code"] = evaluator.returncode
    out["sigterm_bound_s"] = STOP_TIMEOUT_S
    return out


def burrow_side(control: MockKafkaControl, sentinels: list, records: int, tmp: Path, mock_pid: int) -> dict[str, Any]:
    """Burrow's reading of the same records; a Burrow missing or failing is reported, not raised."""
    missing = burrow_available()
    if missing:
        return {"burrow": f"not found (missing: {missing})"}
    try:
        with zookeeper(tmp / "zookeeper") as zk:
            row = burrow_row(control, zk, sentinels, records, tmp, mock_pid)
    except (BenchError, OSError, subprocess.SubprocessError) as exc:
        return {"burrow": f"failed: {str(exc)[:400]}"}
    burrow_mb = row.processes.get("burrow", {}).get("peak_rss_mb", 0.0)
    zookeeper_mb = row.processes.get("zookeeper", {}).get("peak_rss_mb", 0.0)
    return {
        "burrow": "1.2.1 (Debian)",
        "burrow_visible_s": round(row.seconds, 1),
        "burrow_records_per_s": round(row.per_s),
        "burrow_load_1m_at_start": round(row.notes["load_1m"], 1),
        "burrow_peak_rss_mb": round(burrow_mb),
        "burrow_with_zookeeper_peak_rss_mb": round(burrow_mb + zookeeper_mb),
    }


def burrow_row(
    control: MockKafkaControl, zk: tuple[str, subprocess.Popen], sentinels: list, records: int, tmp: Path, mock_pid: int
) -> Row:
    """Burrow's run, tried again when it could not reach a ZooKeeper that has just answered `ruok` (it may not take
    sessions yet: seen here at most runs right after its start)."""
    for attempt in range(BURROW_ATTEMPTS):
        try:
            where, cluster = tmp / f"burrow-{attempt}", f"fleet{attempt}"
            return run_burrow(control.bootstrap, zk, sentinels, records, where, cluster, mock_pid=mock_pid)
        except BenchError as exc:
            if "could not connect" not in str(exc) or attempt == BURROW_ATTEMPTS - 1:
                raise
            time.sleep(2)
    raise AssertionError("unreachable")


def ratios(out: dict[str, Any]) -> dict[str, float]:
    if "burrow_records_per_s" not in out or "ingest_records_per_s" not in out:
        return {}
    total = out["lagwatch_partitions_on_total_peak_rss_mb"]
    return {
        "ingest_vs_burrow_records_per_s": round(out["ingest_records_per_s"] / out["burrow_records_per_s"], 2),
        "memory_vs_burrow": round(total / out["burrow_peak_rss_mb"], 2),
        "memory_vs_burrow_with_zookeeper": round(total / out["burrow_with_zookeeper_peak_rss_mb"], 2),
    }


def summary(out: dict[str, Any]) -> str:
    """One line: each target with its figure and a mark (no figure: not measured)."""
    targets = [
        ("first statuses", "cold_start_s", "< 60 s", lambda v: v < 60),
        ("ingest/Burrow records/s", "ingest_vs_burrow_records_per_s", ">= 2", lambda v: v >= 2),
        ("memory/Burrow", "memory_vs_burrow", "<= 0.6", lambda v: v <= 0.6),
        ("/metrics group-level", "metrics_partitions_off_s", "< 1 s", lambda v: v < 1),
        ("/metrics partitions", "metrics_partitions_on_s", "< 5 s", lambda v: v < 5),
        ("consumer list", "consumer_list_s", "< 1 s", lambda v: v < 1),
        ("dashboard", "dashboard_first_page_s", "< 1 s", lambda v: v < 1),
        ("SIGTERM exit", "sigterm_exit_s", f"<= {STOP_TIMEOUT_S:g} s", lambda v: v <= STOP_TIMEOUT_S),
    ]
    parts = []
    for name, key, target, met in targets:
        value = out.get(key)
        mark = "n/a" if value is None else "PASS" if met(value) else "FAIL"
        parts.append(f"{name} {value} ({target}) {mark}")
    return "; ".join(parts)

"""deploy/grafana/lagwatch.json and deploy/prometheus/ against a real Prometheus scraping a running lagwatch.

One `lagwatch dev up` (what `make run` runs: Redis, the Kafka mock, the five services and the demo workload, whose
groups go WARN and ERR within seconds) and one Prometheus (Debian's, 1 s scrapes and rule evaluations) scraping the
api's /metrics and every service's health port, loading lagwatch-rules.yml. A subscription with a wrong secret
makes the demo's receiver refuse its notifications, so the notifier dead-letters some, and a silence on demo-stopped
holds its notifications back (the dead-letter and held panels have data). Then: every panel's query, with the
template variables substituted (All, and one cluster/group/topic), returns series through Prometheus's HTTP API;
the variables list the demo's values; every rule evaluates without error, the recording rules give series; every
metric the dashboard and the rules name is one lagwatch exports. The demo's archiver writes the history its
banner's Spark command replays.
"""

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
import yaml

from tests import paths
from tests.kafka_helpers import eventually
from tests.net_helpers import free_port

pytestmark = pytest.mark.slow  # it runs Prometheus against a running lagwatch

ROOT = paths.ROOT
DASHBOARD = ROOT / "deploy" / "grafana" / "lagwatch.json"
RULES = ROOT / "deploy" / "prometheus" / "lagwatch-rules.yml"
ALL = {"cluster": ".*", "group": ".*", "topic": ".*"}
ONE = {"cluster": "local", "group": "demo-stalled", "topic": "demo.stalled"}
RATE_INTERVAL, RANGE = "30s", "10m"  # what Grafana would put for $__rate_interval and $__range here


def host_port(url: str) -> str:
    return url.split("://", 1)[1].rstrip("/")


def substituted(expr: str, values: dict[str, str]) -> str:
    expr = expr.replace("$__rate_interval", RATE_INTERVAL).replace("$__range", RANGE)
    return re.sub(r"\$(cluster|group|topic)\b", lambda m: values[m.group(1)], expr)


def panel_targets(dashboard: dict) -> list[tuple[str, dict]]:
    return [(p["title"], t) for p in dashboard["panels"] if p["type"] != "row" for t in p["targets"]]


class Prometheus:
    def __init__(self, url: str, http: aiohttp.ClientSession) -> None:
        self.url, self.http = url, http

    async def get(self, path: str, **params) -> dict | list:
        async with self.http.get(f"{self.url}{path}", params=params) as response:
            body = await response.json()
        assert body["status"] == "success", (path, params, body)
        return body["data"]

    async def series(self, expr: str, instant: bool) -> list:
        if instant:
            return (await self.get("/api/v1/query", query=expr))["result"]
        end = time.time()
        return (await self.get("/api/v1/query_range", query=expr, start=end - 60, end=end, step=1))["result"]


@pytest.fixture(scope="module")
def lagwatch_and_prometheus(tmp_path_factory):
    """The demo system, its env file's addresses, and a Prometheus scraping it; stopped afterwards."""
    assert shutil.which("prometheus"), "prometheus is missing: `make system-deps` installs it (Debian package)"
    base = tmp_path_factory.mktemp("grafana")
    state = base / "state"
    output = (base / "demo-output.txt").open("w")
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS")}
    demo = subprocess.Popen(
        [sys.executable, "-m", "lagwatch.cli", "dev", "up", "--state-dir", str(state), "--api-port", "0"],
        stdout=output,
        stderr=subprocess.STDOUT,
        env=env,
    )
    prometheus = None
    try:
        deadline = time.monotonic() + 180
        while not (state / "env").exists():
            assert demo.poll() is None and time.monotonic() < deadline, (base / "demo-output.txt").read_text()
            time.sleep(0.2)
        time.sleep(0.1)  # written in one call; read it whole
        addresses = dict(line.split("=", 1) for line in (state / "env").read_text().splitlines())
        shutil.copy(RULES, base / RULES.name)
        services = [host_port(addresses[f"{s}_URL"]) for s in ("INGEST", "EVALUATOR", "NOTIFIER", "ARCHIVER")]
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [RULES.name],
            "scrape_configs": [
                {"job_name": "lagwatch-api", "static_configs": [{"targets": [host_port(addresses["API_URL"])]}]},
                {"job_name": "lagwatch-services", "static_configs": [{"targets": services}]},
            ],
        }
        (base / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        prometheus = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={base / 'prometheus.yml'}",
                f"--storage.tsdb.path={base / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=(base / "prometheus.log").open("w"),
            stderr=subprocess.STDOUT,
        )
        yield addresses, f"http://127.0.0.1:{port}", base / "demo-output.txt"
    finally:
        if prometheus is not None:
            prometheus.terminate()
            prometheus.wait(30)
        demo.send_signal(signal.SIGINT)
        try:
            demo.wait(60)
        except subprocess.TimeoutExpired:
            demo.kill()
            demo.wait()
        output.close()


@pytest.fixture(scope="module")
def scraped(lagwatch_and_prometheus):
    """Once Prometheus holds the demo's statuses (demo-stalled ERR), a sweep, a dead letter and a held notification."""
    addresses, prometheus_url, output = lagwatch_and_prometheus

    async def wait() -> None:
        async with aiohttp.ClientSession() as http:
            # a subscription whose signatures the receiver refuses (401): its notifications are dead-lettered
            refused = {"id": "refused", "type": "webhook", "url": f"{addresses['RECEIVER_URL']}/webhook"}
            async with http.post(
                f"{addresses['API_URL']}/api/v1/subscriptions",
                json={**refused, "secret": "not-the-receivers"},
                headers={"Authorization": f"Bearer {addresses['API_TOKEN']}"},
            ) as response:
                assert response.status in (200, 201), await response.text()
            # a silence on demo-stopped: its ERR notifications are held back while it holds
            async with http.post(
                f"{addresses['API_URL']}/api/v1/silences",
                json={
                    "matchers": [{"name": "group", "value": "demo-stopped"}],
                    "ends-at": time.time() + 3600,
                    "reason": "the held-notifications panel",
                    "created-by": "tests",
                },
                headers={"Authorization": f"Bearer {addresses['API_TOKEN']}"},
            ) as response:
                assert response.status in (200, 201), await response.text()
            prometheus = Prometheus(prometheus_url, http)

            wanted = {
                "demo-stalled ERR": 'burrow_kafka_consumer_status{consumer_group="demo-stalled"} >= 3',
                "a dead letter": "lagwatch_notifier_dead_letters_total",
                "a held notification": "lagwatch_notifier_held_total",
                "a sweep": "lagwatch_evaluator_last_sweep_timestamp_seconds",
            }
            missing = list(wanted)

            async def ready() -> bool:
                try:
                    missing[:] = [k for k, q in wanted.items() if not await prometheus.series(q, instant=True)]
                except (aiohttp.ClientError, AssertionError, ValueError) as exc:
                    missing[:] = [f"Prometheus: {exc!r}"]
                return not missing

            try:
                await eventually(ready, timeout=90, interval=1)
            except AssertionError:
                raise AssertionError(f"missing {missing}; demo output:\n{output.read_text()[-3000:]}") from None
            await asyncio.sleep(3)  # a few more scrapes: rates and increases have two points

    asyncio.run(wait())
    return addresses, prometheus_url, output


def run(coroutine_function, prometheus_url: str):
    async def main():
        async with aiohttp.ClientSession() as http:
            return await coroutine_function(Prometheus(prometheus_url, http))

    return asyncio.run(main())


@pytest.mark.parametrize("values", [ALL, ONE], ids=["all", "one group"])
def test_every_panel_query_returns_series_from_a_prometheus_scraping_lagwatch(scraped, values):
    _, prometheus_url, _ = scraped
    dashboard = json.loads(DASHBOARD.read_text())
    targets = panel_targets(dashboard)
    assert len(targets) >= 20

    async def check(prometheus: Prometheus) -> list[str]:
        empty = []
        for title, target in targets:
            expr = substituted(target["expr"], values)
            assert "$" not in expr.replace('"lagwatch-$1"', ""), expr  # every variable substituted
            if not await prometheus.series(expr, target["instant"]):
                empty.append(f"{title}: {expr}")
        return empty

    assert run(check, prometheus_url) == []


def test_one_groups_panels_show_only_that_group(scraped):
    _, prometheus_url, _ = scraped
    dashboard = json.loads(DASHBOARD.read_text())
    incidents = next(t for title, t in panel_targets(dashboard) if title.startswith("Open incidents"))
    by_partition = next(t for title, t in panel_targets(dashboard) if title == "Lag (messages), by partition")

    async def check(prometheus: Prometheus):
        open_now = await prometheus.series(substituted(incidents["expr"], ALL), instant=True)
        partitions = await prometheus.series(substituted(by_partition["expr"], ONE), instant=False)
        return open_now, partitions

    open_now, partitions = run(check, prometheus_url)
    statuses = {s["metric"]["consumer_group"]: s["value"][1] for s in open_now}
    assert statuses.get("demo-stalled") == "3" and statuses.get("demo-stopped") == "3", statuses
    assert "demo-healthy" not in statuses and "demo-idle" not in statuses
    assert {(s["metric"]["consumer_group"], s["metric"]["topic"]) for s in partitions} == {
        ("demo-stalled", "demo.stalled")
    }


def test_the_variables_list_the_demos_clusters_groups_and_topics(scraped):
    _, prometheus_url, _ = scraped
    variables = {v["name"]: v for v in json.loads(DASHBOARD.read_text())["templating"]["list"]}
    assert variables["datasource"]["query"] == "prometheus"

    async def values(prometheus: Prometheus, name: str, chosen: dict) -> set[str]:
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", substituted(variables[name]["definition"], chosen))
        metric, label = match.groups()
        return set(await prometheus.get(f"/api/v1/label/{label}/values", **{"match[]": metric}))

    async def check(prometheus: Prometheus):
        return (
            await values(prometheus, "cluster", ALL),
            await values(prometheus, "group", ONE),
            await values(prometheus, "topic", ONE),
        )

    clusters, groups, topics = run(check, prometheus_url)
    assert clusters == {"local"}
    assert {"demo-healthy", "demo-lagging", "demo-stalled", "demo-stopped", "demo-rewound", "lagwatch-local"} <= groups
    assert topics == {"demo.stalled"}  # the topics of the chosen group


def test_the_rules_evaluate_without_errors_against_lagwatchs_series(scraped):
    _, prometheus_url, _ = scraped

    async def check(prometheus: Prometheus):
        groups = (await prometheus.get("/api/v1/rules"))["groups"]
        recorded = {
            name: await prometheus.series(name, instant=True)
            for name in (
                "cluster_consumer_group:burrow_kafka_consumer_status:max",
                "cluster_status:lagwatch_consumer_groups:count",
                "cluster:lagwatch_ingest_behind_seconds:max",
                "cluster:lagwatch_ingest_records:rate5m",
                "instance_cluster:lagwatch_evaluation_seconds:busy5m",
                "type_result:lagwatch_notifier_deliveries:rate5m",
            )
        }
        sweep_age = await prometheus.series("time() - lagwatch_evaluator_last_sweep_timestamp_seconds", instant=True)
        held = await prometheus.series("max by (cluster) (lagwatch_evaluator_clock_held_seconds)", instant=True)
        instances = await prometheus.series("lagwatch_service_instances", instant=True)
        unsent = await prometheus.series("lagwatch_evaluator_unsent_events_seconds", instant=True)
        checks = await prometheus.series("lagwatch_service_ready", instant=True)
        return groups, recorded, sweep_age, held, instances, unsent, checks

    groups, recorded, sweep_age, held, instances, unsent, checks = run(check, prometheus_url)
    rules = [r for g in groups for r in g["rules"]]
    assert len(rules) == 49
    assert [(r["name"], r["lastError"]) for r in rules if r["health"] != "ok"] == []
    assert {name: series for name, series in recorded.items() if not series} == {}
    (behind,) = recorded["cluster:lagwatch_ingest_behind_seconds:max"]
    assert behind["metric"] == {"__name__": "cluster:lagwatch_ingest_behind_seconds:max", "cluster": "local"}
    assert float(behind["value"][1]) < 60  # the ingest keeps up with the demo
    counts = {
        s["metric"]["status"]: float(s["value"][1]) for s in recorded["cluster_status:lagwatch_consumer_groups:count"]
    }
    assert counts.get("3", 0) >= 2  # demo-stalled and demo-stopped are ERR
    # the demo sweeps every second: the sweep gauge is fresh, so LagwatchEvaluatorSweepsLate stays quiet
    assert sweep_age and all(float(s["value"][1]) < 10 for s in sweep_age)
    # the ingest reads the demo's offsets as they come: the rules' clock is not held (LagwatchRulesClockHeld quiet)
    assert held and all(float(s["value"][1]) < 5 for s in held)
    # each of the demo's services says it runs, through the api (LagwatchServiceNotRunning quiet)
    running = {(s["metric"]["cluster"], s["metric"]["service"]): int(s["value"][1]) for s in instances}
    assert running.keys() == {("local", "ingest"), ("local", "evaluator"), ("local", "notifier")}
    assert all(n >= 1 for n in running.values()), running
    # the demo's status events reach Kafka as they are made (LagwatchStatusEventsUnsent quiet)
    assert [(s["metric"]["cluster"], float(s["value"][1])) for s in unsent] == [("local", 0.0)]
    # every service's readiness checks pass, each scraped from its health port (LagwatchServiceNotReady quiet)
    ready = {(s["metric"]["service"], s["metric"]["check"]): float(s["value"][1]) for s in checks}
    assert {"ingest", "evaluator", "notifier"} <= {service for service, _ in ready}, ready
    assert set(ready.values()) == {1.0}, ready
    firing = {r["name"] for r in rules if r["type"] == "alerting" and r["state"] != "inactive"}
    assert "LagwatchNotifierDeadLetters" in firing  # the refused subscription's dead letters
    assert not firing & {
        "LagwatchIngestBehind",
        "LagwatchEvaluatorSweepsLate",
        "LagwatchTargetDown",
        "LagwatchServiceNotRunning",
        "LagwatchStatusEventsUnsent",
        "LagwatchNotifierEventsFailed",
        "LagwatchNotifierEventsUnreadable",
        "LagwatchNotifierEventsSkipped",
        "LagwatchEvaluatorUnreadableGroups",
        "LagwatchServiceNotReady",
        "LagwatchServiceDead",
        "LagwatchServiceKafkaUnreachable",
        "LagwatchCommitClockBehind",  # the demo's coordinator and lagwatch share a clock
        "LagwatchCommitClockAhead",
        "LagwatchIngestLate",
    }


def exported_names(prometheus_names: set[str]) -> set[str]:
    """What Prometheus scraped, plus every series lagwatch's processes register (some appear only after an event)."""
    from prometheus_client import REGISTRY

    import lagwatch.services.archiver.service
    import lagwatch.services.evaluator.service
    import lagwatch.services.ingest.metrics
    import lagwatch.services.notifier.metrics  # noqa: F401

    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"], "gauge": [""]}
    registered = {m.name + s for m in REGISTRY.collect() for s in suffixes.get(m.type, [""])}
    return prometheus_names | registered


def test_every_metric_the_dashboard_and_rules_name_is_one_lagwatch_exports(scraped):
    _, prometheus_url, _ = scraped
    names = run(lambda p: p.get("/api/v1/label/__name__/values"), prometheus_url)
    known = exported_names(set(names)) | {"up", "scrape_duration_seconds"}
    rules = yaml.safe_load(RULES.read_text())
    exprs = [t["expr"] for _, t in panel_targets(json.loads(DASHBOARD.read_text()))]
    exprs += [r["expr"] for g in rules["groups"] for r in g["rules"]]
    used = {n for e in exprs for n in re.findall(r"(?<![:\w])((?:lagwatch|burrow)_[a-z_]+)\b(?!:)", e)}
    assert len(used) > 20 and used - known == set()


def test_the_demo_archives_its_history_for_the_replay_its_banner_prints(scraped):
    addresses, _, output = scraped
    from lagwatch.spark.reprocess import add_arguments  # the job's own options

    banner = output.read_text()
    command = next(line.split() for line in banner.splitlines() if " spark reprocess " in line)
    assert Path(command[0]).name == "lagwatch" and Path(command[0]).exists()
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    options = parser.parse_args(command[3:])
    assert options.input == addresses["HISTORY_DIR"] and Path(options.config).exists()
    assert f"charts: {options.output}/charts/index.html" in banner
    assert any(Path(addresses["HISTORY_DIR"]).rglob("*.parquet"))  # the archiver has written files


def test_the_dashboard_file_is_what_its_generator_writes():
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "grafana_dashboard.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    dashboard = json.loads(DASHBOARD.read_text())
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource", "cluster", "group", "topic"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:  # inside the 24-column grid
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]

"""`lagwatch dev up` (what `make run` runs): the whole lagwatch system on this machine, with a demo workload.

One supervisor process starts Redis (emptied: the mock Kafka starts empty too) and the Kafka mock (`stack`), a local
webhook receiver standing in for Slack and webhook endpoints, then `lagwatch run <service>` for every service, as
child processes configured by `<state-dir>/demo.yaml` (demo timings, two subscriptions to the receiver, the history
archived to `<state-dir>/history`) and the environment, exactly as against a real cluster; once every service answers
`/readyz`, the demo workload (`demo_workload`). It prints where to look and every scenario's turn and alert until
Ctrl-C or SIGTERM, then stops everything in reverse. A service that dies is started again, as an orchestrator would
(one that keeps dying within `CRASH_LOOP_S` of its start stops the demo). tests/system/test_fault_drills.py runs the
same system without the workload or the archiver, and plays its own faults.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import redis
import yaml

from lagwatch.cli import USAGE_ERROR
from lagwatch.devkit.demo_processes import ServiceProcess, stop_all
from lagwatch.devkit.demo_scenarios import RETENTION_RISK_S, Phase, Scenario, scenarios
from lagwatch.devkit.demo_workload import demo_topics, run_workload
from lagwatch.devkit.ports import free_port, is_free
from lagwatch.devkit.stack import ENV_FILE, LocalInfra, local_infra, shell_command, write_env_file
from lagwatch.devkit.webhook_receiver import ReceivedAlert, WebhookReceiver
from lagwatch.shared.runtime.config import HistoryConfig

CLUSTER = "local"  # the cluster KAFKA_BOOTSTRAP_SERVERS points at
SERVICES = ("ingest", "evaluator", "notifier", "api")
ARCHIVER = "archiver"  # with the history on: the ingest publishes it, the archiver writes it to Parquet
HISTORY_TOPIC_PARTITIONS = 3
HISTORY_DIR, REPLAY_DIR = "history", "replay"  # under the state directory
CONFIG_FILE = "demo.yaml"
ALERTS_FILE = "alerts.jsonl"
DEFAULT_API_PORT = 8000
READY_TIMEOUT_S = 180.0  # four Python services starting on a busy 2-CPU machine
CRASH_LOOP_S = 30.0  # a service that dies sooner than this after its start is crash-looping...
MAX_CRASH_LOOPS = 5  # ...and after this many such deaths in a row the demo gives up on it
MAX_PORT_MOVES = 3  # a service whose port was taken is started on another port at most this many times
Print = Callable[[str], None]


@dataclass(frozen=True)
class DemoTimings:
    """Fast settings so every scenario reaches its status within about 20 seconds of starting."""

    intervals: int = 5  # commits per window (Burrow: 10)
    tick_s: float = 1.0  # the workload commits once per tick (real consumers: every few seconds)
    offset_refresh: float = 0.25  # seconds between log-end polls (Burrow: 10); well below half a tick
    topic_refresh: float = 1.0
    sweep_interval: float = 1.0  # the evaluator's sweep finds STOP within this
    max_poll_interval: float = 300.0  # the demo consumers' max.poll.interval.ms, in seconds (Kafka's default)
    history_flush: float = 5.0  # the archiver writes Parquet files at least this often, seconds (default 60)


class StopRequested(Exception):
    """Ctrl-C or SIGTERM while starting up."""


def demo_config(
    receiver: WebhookReceiver,
    ports: dict[str, int],
    token: str,
    timings: DemoTimings,
    history_dir: Path | None = None,
) -> dict[str, Any]:
    """The services' configuration file: demo timings, ports, subscriptions to the local receiver, and, given a
    `history_dir`, the history on (the archiver writes it there)."""
    api = f"http://127.0.0.1:{ports['api']}"
    config: dict[str, Any] = {
        "storage": {"intervals": timings.intervals},
        "clusters": {CLUSTER: {"offset-refresh": timings.offset_refresh, "topic-refresh": timings.topic_refresh}},
        "ingest": {"session-timeout": 3, "http-port": ports["ingest"]},  # quick joins (the mock waits a session)
        "evaluator": {"sweep-interval": timings.sweep_interval, "http-port": ports["evaluator"]},
        "api": {"port": ports["api"], "token": token},
        "notifier": {
            "http-port": ports["notifier"],
            "allow-private-targets": True,  # the receiver is on 127.0.0.1
            # the alert's group opened, the rows filtered for it (on any page of a big cluster)
            "dashboard-url": f"{api}/dashboard?cluster={{cluster}}&q={{group}}&group={{group}}",
            "backoff-base": 0.5,
            "backoff-cap": 5,
            "request-timeout": 4,  # the receiver is local: answers come at once
            "lease": 5,  # a notifier that died mid-request has its deliveries taken over within seconds
        },
        "subscriptions": [
            {
                "id": f"demo-{kind}",
                "type": kind,
                "url": receiver.url(kind),
                "secret": receiver.secret,
                "retention-risk-threshold": RETENTION_RISK_S,  # the retention scenario's alert
            }
            for kind in ("webhook", "slack")
        ],
    }
    if history_dir is not None:
        history = {"enabled": True, "path": str(history_dir), "flush-interval": timings.history_flush}
        config["history"] = {**history, "http-port": ports[ARCHIVER]}
    return config


def _port_or_free(port: int) -> int:
    """`port` if nothing listens on it, else any free port (0 = any free port)."""
    return port if port and is_free(port) else free_port()


def _stamp() -> str:
    return time.strftime("%H:%M:%S")


class DemoSystem:
    def __init__(
        self,
        state_dir: Path,
        infra: LocalInfra,
        api_port: int,
        timings: DemoTimings,
        out: Print,
        *,
        workload: Sequence[Scenario] | None = None,
        archiver: bool = False,
    ) -> None:
        """`workload`: the scenarios to play (default: every demo scenario; empty: the services only); `archiver`:
        the history on, and the archiver writing it under `<state_dir>/history` (Kafka needs its topic)."""
        self.state_dir = state_dir
        self.infra = infra
        self.timings = timings
        self.out = out
        self.scenarios = scenarios(timings.intervals) if workload is None else tuple(workload)
        self.stop = asyncio.Event()
        self.ready = asyncio.Event()  # every service answers /readyz: the banner is out
        self.token = secrets.token_hex(16)
        self.receiver = WebhookReceiver(
            secrets.token_hex(16), record_file=state_dir / ALERTS_FILE, on_alert=self._print_alert
        )
        self.api_port_wanted = api_port
        self.archiver = archiver
        names = (*SERVICES, ARCHIVER) if archiver else SERVICES
        self.ports = {"api": _port_or_free(api_port), **{s: free_port() for s in names if s != "api"}}
        self.services = [ServiceProcess(name, self.ports[name], self._logs() / f"{name}.log") for name in names]

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['api']}"

    @property
    def history_dir(self) -> Path | None:
        return self.state_dir / HISTORY_DIR if self.archiver else None

    def replay_command(self) -> str:
        """The Spark job over the demo's own history, with the demo's rules and timings (its config file)."""
        lagwatch = Path(sys.executable).with_name("lagwatch")
        return (
            f"{lagwatch} spark reprocess --input {self.state_dir / HISTORY_DIR} --output"
            f" {self.state_dir / REPLAY_DIR} --config {self.state_dir / CONFIG_FILE} --master local[2]"
        )

    async def run(self) -> int:
        (self.state_dir / ALERTS_FILE).unlink(missing_ok=True)
        if self.history_dir is not None:  # a previous run's history would meet groups started afresh
            shutil.rmtree(self.history_dir, ignore_errors=True)
        with redis.Redis.from_url(self.infra.redis.url) as client:
            client.flushall()  # windows of a previous run would meet an empty Kafka: start clean
        await self.receiver.start()
        try:
            config_file = self._write_config()
            env = {**_inherited_env(), **self.infra.env(), "LAGWATCH_CONFIG": str(config_file)}
            for service in self.services:
                service.start(env, cwd=self.state_dir)
            try:
                await self._until_ready()
            except StopRequested:
                return 0
            self._write_env_file()
            self.out(self._banner(config_file))
            self.ready.set()
            return await self._supervise()
        finally:
            self.out("lagwatch demo: stopping")
            await asyncio.to_thread(stop_all, self.services)  # the receiver still answers a notifier finishing up
            await self.receiver.stop()

    def _write_config(self) -> Path:
        path = self.state_dir / CONFIG_FILE
        doc = demo_config(self.receiver, self.ports, self.token, self.timings, self.history_dir)
        path.write_text(
            "# Written by `lagwatch dev up` for the demo: fast timings, and the local receiver as subscriptions.\n"
            + yaml.safe_dump(doc, sort_keys=False)
        )
        return path

    def _write_env_file(self) -> None:
        write_env_file(self.state_dir, {**self.infra.env(), **self._addresses(self.state_dir / CONFIG_FILE)})

    async def _until_ready(self) -> None:
        """Every service answers /readyz and the api lists the demo topics (the log-end poller knows them)."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        async with aiohttp.ClientSession() as session:
            pending = list(self.services)
            while pending or not await self._topics_known(session):
                await self._check_alive()
                if self.stop.is_set():
                    raise StopRequested
                if time.monotonic() > deadline:
                    names = ", ".join(s.name for s in pending) or "the api's topic list"
                    raise RuntimeError(f"not ready after {READY_TIMEOUT_S:.0f}s: {names} (logs in {self._logs()})")
                pending = [s for s in pending if not await s.ready(session)]
                await asyncio.sleep(0.25)

    async def _topics_known(self, session: aiohttp.ClientSession) -> bool:
        try:
            async with session.get(f"{self.api_url}/v3/kafka/{CLUSTER}/topic") as response:
                known = set((await response.json()).get("topics") or []) if response.status == 200 else set()
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return False
        return all(s.topic in known for s in self.scenarios)

    async def _supervise(self) -> int:
        workload = None
        if self.scenarios:
            workload = asyncio.create_task(
                run_workload(
                    self.infra.kafka.bootstrap,
                    self.scenarios,
                    tick_s=self.timings.tick_s,
                    announce=self._announce,
                    on_ready=lambda: self.out(f"{_stamp()}  demo consumers joined their groups; alerts appear below"),
                    max_poll_interval_ms=int(self.timings.max_poll_interval * 1000),
                )
            )
        try:
            while not self.stop.is_set():
                await self._restart_dead()
                if workload is not None and workload.done():
                    raise RuntimeError(f"the demo workload stopped: {workload.exception()!r}")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop.wait(), 0.5)
            return 0
        finally:
            if workload is not None:
                workload.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.wait_for(workload, 15)

    async def _exited(self) -> list[tuple[ServiceProcess, int]]:
        """The services that exited and their codes; one that only found its port taken is started on another."""
        exited = []
        for service in self.services:
            code = service.exit_code()
            if code is not None and self._port_taken(service, code):
                await self._move_port(service)
            elif code is not None:
                exited.append((service, code))
        return [(s, code) for s, code in exited if s.exit_code() is not None]  # (an api's move restarts the notifier)

    async def _restart_dead(self) -> None:
        """Start a service that died again: what it was doing is in Redis and Kafka, and it takes over from there."""
        for service, code in await self._exited():
            quick = time.monotonic() - service.started_at < CRASH_LOOP_S
            service.crash_loops = service.crash_loops + 1 if quick else 0
            if service.crash_loops >= MAX_CRASH_LOOPS:
                raise RuntimeError(
                    f"{service.name} keeps exiting (code {code}, {service.crash_loops} times within"
                    f" {CRASH_LOOP_S:.0f}s of starting); last lines of {service.log_file}:\n{service.log_tail()}"
                )
            self.out(f"{_stamp()}  {service.name} exited with code {code}; starting it again (log: {service.log_file})")
            service.restart()

    async def _check_alive(self) -> None:
        """While the services start, one that exits stops the demo, unless it only found its port taken."""
        for service, code in await self._exited():
            raise RuntimeError(
                f"{service.name} exited with code {code}; last lines of {service.log_file}:\n{service.log_tail()}"
            )

    @staticmethod
    def _port_taken(service: ServiceProcess, code: int) -> bool:
        """It exited because its port is in use: free when the demo chose it, taken before the service bound it (by
        another process choosing a free port, or as a client connection's ephemeral port). `lagwatch run` says so in
        one line and exits with its usage-error code."""
        said = f"lagwatch: cannot listen on 127.0.0.1:{service.port} "
        return code == USAGE_ERROR and service.port_moves < MAX_PORT_MOVES and said in service.log_tail(3)

    async def _move_port(self, service: ServiceProcess) -> None:
        """Start `service` again on another free port, written to the configuration (and to the addresses file)."""
        taken = service.port
        service.port = self.ports[service.name] = free_port()
        service.port_moves += 1
        self._write_config()
        if self.ready.is_set():
            self._write_env_file()
        self.out(f"{_stamp()}  {service.name}: port {taken} was taken meanwhile; starting it on port {service.port}")
        service.restart()
        if service.name == "api":  # the notifier's alerts link to the dashboard at the api's address: it reads it again
            notifier = next(s for s in self.services if s.name == "notifier")
            await asyncio.to_thread(stop_all, [notifier])
            notifier.restart()

    def _addresses(self, config_file: Path) -> dict[str, str]:
        return {
            "LAGWATCH_CONFIG": str(config_file),
            "API_URL": self.api_url,
            "DASHBOARD_URL": f"{self.api_url}/dashboard",
            "API_TOKEN": self.token,
            "RECEIVER_URL": f"http://127.0.0.1:{self.receiver.port}",
            "ALERTS_FILE": str(self.state_dir / ALERTS_FILE),
            # health and metrics of the other services (the api's are at API_URL)
            **{f"{s.name.upper()}_URL": s.url for s in self.services if s.name != "api"},
            **({"HISTORY_DIR": str(self.history_dir)} if self.history_dir is not None else {}),
        }

    def _logs(self) -> Path:
        return self.state_dir / "logs"

    def _banner(self, config_file: Path) -> str:
        api, wanted = self.api_url, self.api_port_wanted
        taken = f"   (port {wanted} is taken)" if wanted and wanted != self.ports["api"] else ""
        services = ", ".join(f"{s.name} :{s.port}" for s in self.services)
        groups = "\n".join(
            f"    {s.group:<14} on {s.topic:<14} {' -> '.join(status for _, status in s.expected)}"
            + ("   + its data-loss-risk alert" if s.alerts else "")
            for s in self.scenarios
        )
        return (
            "lagwatch is running (Ctrl-C stops everything)\n"
            f"  Dashboard:  {api}/dashboard{taken}\n"
            f"  API:        {api}/v3/kafka/{CLUSTER}/consumer   (Burrow v3; also /metrics, /healthz,"
            " /api/v1/subscriptions)\n"
            f"  Kafka:      {self.infra.kafka.bootstrap}   status events: lagwatch.status, dead letters: lagwatch.dlq\n"
            f"  Redis:      {self.infra.redis.url}\n"
            f"  Alerts:     a local receiver on http://127.0.0.1:{self.receiver.port} (/webhook, /slack), "
            f"kept in {self.state_dir / ALERTS_FILE}\n"
            f"  Services:   {services}   (health ports; logs in {self._logs()})\n"
            f"  Config:     {config_file}   addresses for other shells: {shell_command(self.state_dir / ENV_FILE)}\n"
            f"{self._history_lines()}"
            f"Demo workload: one consumer group per scenario, committing every {self.timings.tick_s:g}s, windows of"
            f" {self.timings.intervals} commits; statuses they go through:\n{groups}\n"
            f"Try:  curl -s {api}/v3/kafka/{CLUSTER}/consumer/demo-stalled/status"
        )

    def _history_lines(self) -> str:
        if self.history_dir is None:
            return ""
        return (
            f"  History:    every commit and log-end sample, archived to {self.history_dir} (Parquet, every"
            f" {self.timings.history_flush:g}s)\n"
            f"  Replay it on Spark (any time, from another shell; a few minutes on 2 cores):\n"
            f"      {self.replay_command()}\n"
            f"    charts: {self.state_dir / REPLAY_DIR / 'charts' / 'index.html'}   (report, timeline, events and"
            f" backtest beside them)\n"
        )

    def _announce(self, scenario: Scenario, phase: Phase) -> None:
        self.out(f"{_stamp()}  scenario {scenario.group}: {phase.note}")

    def _print_alert(self, alert: ReceivedAlert) -> None:
        self.out(f"{_stamp()}  ALERT {alert.summary()}")


def _inherited_env() -> dict[str, str]:
    # lagwatch settings of the calling shell would mix with the demo's own
    return {k: v for k, v in os.environ.items() if not k.startswith("LAGWATCH__") and k != "LAGWATCH_CONFIG"}


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM while Redis and Kafka start: unwind, stopping what has started


def run_demo(
    state_dir: Path,
    *,
    redis_port: int | None = None,
    kafka_port: int | None = None,
    api_port: int = DEFAULT_API_PORT,
    timings: DemoTimings | None = None,
    out: Print | None = None,
) -> int:
    """Run the whole system until Ctrl-C/SIGTERM; the exit code (0 after a requested stop)."""
    state_dir = state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    out = out or (lambda line: print(line, flush=True))
    timings = timings or DemoTimings()
    logs = state_dir / "logs"
    logs.mkdir(exist_ok=True)
    # The workload's Kafka clients log here, not over the alerts.
    logging.basicConfig(level=logging.WARNING, filename=logs / "workload.log", force=True)
    signal.signal(signal.SIGTERM, _interrupt)
    out(f"lagwatch demo: starting Redis, the Kafka mock and the services (logs in {logs})")
    try:
        with local_infra(
            state_dir,
            redis_port=redis_port,
            kafka_port=kafka_port,
            extra_topics={
                **demo_topics(scenarios(timings.intervals)),
                HistoryConfig().topic: HISTORY_TOPIC_PARTITIONS,
            },
        ) as infra:
            return asyncio.run(_run(state_dir, infra, api_port, timings, out))
    except RuntimeError as exc:
        print(f"lagwatch demo: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        (state_dir / ENV_FILE).unlink(missing_ok=True)


async def _run(state_dir: Path, infra: LocalInfra, api_port: int, timings: DemoTimings, out: Print) -> int:
    system = DemoSystem(state_dir, infra, api_port, timings, out, archiver=True)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, system.stop.set)
    return await system.run()

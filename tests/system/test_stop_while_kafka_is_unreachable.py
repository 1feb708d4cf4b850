"""A service told to stop while it is still waiting for Kafka (a broker outage at start-up, a rollout that gives up)
stops cleanly: exit code 0, and no traceback or "Unclosed" client in its log. A Kafka client whose start failed
still holds one: the notifier's dead-letter producer and the archiver's next consumer were left unclosed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.net_helpers import answers_ok, free_port, restart_where_port_taken

LAGWATCH = str(Path(sys.executable).parent / "lagwatch")
SERVICES = ("evaluator", "notifier", "archiver")


@pytest.mark.timeout(120)
def test_a_service_stopped_while_kafka_is_unreachable_exits_cleanly(redis_server, tmp_path):
    env = dict(
        os.environ,
        REDIS_URL=redis_server.url,
        KAFKA_BOOTSTRAP_SERVERS=f"127.0.0.1:{free_port()}",  # nothing listens there
        LAGWATCH__HISTORY__PATH=str(tmp_path / "history"),
    )
    ports = {service: free_port() for service in SERVICES}
    logs = {service: tmp_path / f"{service}.log" for service in SERVICES}

    def start(service: str) -> subprocess.Popen:
        argv = [LAGWATCH, "run", service, "--http-port", str(ports[service])]
        return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=logs[service].open("w"))

    processes = {service: start(service) for service in SERVICES}
    try:
        deadline = time.monotonic() + 60
        while not all(answers_ok(port, "/healthz") for port in ports.values()) and time.monotonic() < deadline:
            restart_where_port_taken(processes, ports, logs, start)
            time.sleep(0.3)
        time.sleep(2.0)  # a few attempts to reach Kafka
        for process in processes.values():
            process.send_signal(signal.SIGTERM)
        codes = {service: process.wait(60) for service, process in processes.items()}
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
    for service in SERVICES:
        log = logs[service].read_text()
        assert codes[service] == 0, log[-2000:]
        assert "Unclosed" not in log and "Traceback" not in log, f"{service}:\n{log[-2000:]}"

"""Every service starts with a read-only working directory, as the Kubernetes manifests run them
(deploy/kubernetes/base: `readOnlyRootFilesystem`, the image's WORKDIR /app, only /tmp writable). Faust makes a data
dir on its first start, in the working directory unless told otherwise: the evaluator exited with
`[Errno 30] Read-only file system: 'lagwatch-evaluator-<cluster>-data'` there.

The read-only directory is a tmpfs mounted read-only in a mount namespace of the service's own (`unshare`, from
util-linux: as root, or in a user namespace of its own, which Debian allows any user), so nothing is mounted on the
machine itself."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.net_helpers import answers_ok, free_port, restart_where_port_taken

LAGWATCH = str(Path(sys.executable).parent / "lagwatch")
SERVICES = ("ingest", "evaluator", "notifier", "api", "archiver")
TOPICS = {
    "lagwatch.status": 2,
    "lagwatch.changes": 2,
    "lagwatch.lag-thresholds": 2,
    "lagwatch.dlq": 1,
    "lagwatch.history": 2,
}
READY_TIMEOUT_S = 60


def command(service: str, port: int) -> list[str]:
    """`lagwatch run <service>`; one ingest worker whatever the machine's CPUs: no rebalance to wait for."""
    return [LAGWATCH, "run", service, "--http-port", str(port), *(("--workers", "1") if service == "ingest" else ())]


def in_read_only_directory(directory: Path, command: list[str]) -> list[str]:
    """`command` run with `directory` as its working directory, mounted read-only in a private mount namespace."""
    unshare = shutil.which("unshare") or "unshare"
    namespace = [unshare, "--mount"] if os.geteuid() == 0 else [unshare, "--mount", "--map-root-user"]
    script = 'mount -t tmpfs -o ro tmpfs "$1" && cd "$1" && shift && exec "$@"'
    return [*namespace, "sh", "-c", script, "sh", str(directory), *command]


@pytest.mark.timeout(180)
def test_every_service_starts_and_gets_ready_with_a_read_only_working_directory(kafka, redis_server, tmp_path):
    for topic, partitions in TOPICS.items():
        kafka.create_topic(topic, partitions)
    directory = tmp_path / "app"
    directory.mkdir()
    env = dict(
        os.environ,
        REDIS_URL=redis_server.url,
        KAFKA_BOOTSTRAP_SERVERS=kafka.bootstrap,
        LAGWATCH__HISTORY__ENABLED="true",
        LAGWATCH__HISTORY__PATH=str(tmp_path / "history"),
        TMPDIR=str(tmp_path),  # writable, as /tmp is in the manifests
    )
    ports = {service: free_port() for service in SERVICES}
    logs = {service: tmp_path / f"{service}.log" for service in SERVICES}

    def start(service: str) -> subprocess.Popen:
        argv = in_read_only_directory(directory, command(service, ports[service]))
        return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=logs[service].open("w"))

    processes = {service: start(service) for service in SERVICES}
    try:
        pending, deadline = set(SERVICES), time.monotonic() + READY_TIMEOUT_S
        while pending and time.monotonic() < deadline:
            restart_where_port_taken(processes, ports, logs, start)  # taken since it was chosen: another one
            for service in sorted(pending):
                assert processes[service].poll() is None, f"{service} exited:\n{logs[service].read_text()[-2000:]}"
                if answers_ok(ports[service], "/readyz"):
                    pending.discard(service)
            time.sleep(0.5)
        assert not pending, {s: logs[s].read_text()[-1500:] for s in pending}
        assert not any(directory.iterdir())  # nothing was written there (nor could be)
    finally:
        for process in processes.values():
            process.terminate()
        for process in processes.values():
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

"""Why the ingest consumes in batches: how fast a Faust agent moves offsets-topic records on this machine.

Writes N commit records into `__consumer_offsets` on the Kafka mock cluster, then runs a Faust worker whose agent
only counts them (`stream.take_events`, the batching API), and, in the same run, a bare aiokafka batch consumer.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from bench_ingest import bare_consumer, produce

from lagwatch.devkit.mock_kafka import start_mock_kafka_process, stop_process
from lagwatch.devkit.offsets_topic_writer import DEFAULT_PARTITIONS, OFFSETS_TOPIC

AGENT = textwrap.dedent(
    """
    import os, time, faust
    total = int(os.environ["TOTAL"])
    app = faust.App("bench-faust-%d" % time.time(), broker="kafka://" + os.environ["BOOTSTRAP"], web_enabled=False,
                    topic_allow_declare=False, topic_disable_leader=True, consumer_auto_offset_reset="earliest",
                    broker_max_poll_records=10000, stream_buffer_maxsize=100000)
    topic = app.topic("__consumer_offsets", key_type=bytes, value_type=bytes, key_serializer="raw",
                      value_serializer="raw")
    state = {"n": 0, "t0": None}

    @app.agent(topic)
    async def count(stream):
        async for events in stream.take_events(5000, within=0.05):
            state["t0"] = state["t0"] or time.perf_counter()
            state["n"] += len(events)
            if state["n"] >= total:
                print("RATE=%.1f" % (state["n"] / (time.perf_counter() - state["t0"])), flush=True)
                os._exit(0)

    if __name__ == "__main__":
        app.main()
    """
)


def faust_rate(bootstrap: str, total: int, workdir: Path) -> float:
    script = workdir / "faust_count.py"
    script.write_text(AGENT)
    env = dict(os.environ, BOOTSTRAP=bootstrap, TOTAL=str(total))
    done = subprocess.run(
        [sys.executable, str(script), "worker", "-l", "warn"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = done.stdout + done.stderr  # Faust sends print() through its logging
    return float(re.search(r"RATE=([0-9.]+)", out).group(1))


def run(groups: int = 2000, partitions: int = 10, rounds: int = 10) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        proc, control = start_mock_kafka_process(Path(tmp), {OFFSETS_TOPIC: DEFAULT_PARTITIONS})
        try:
            n = produce(control.bootstrap, groups, partitions, rounds)
            bare = asyncio.run(bare_consumer(control.bootstrap, n))
            start = time.perf_counter()
            faust = faust_rate(control.bootstrap, n, Path(tmp))
            wall = time.perf_counter() - start
        finally:
            stop_process(proc)
    return {
        "records": n,
        "bare_aiokafka_per_s": round(bare),
        "faust_agent_per_s": round(faust),
        "faust_wall_seconds": round(wall, 1),
        "bare_vs_faust": round(bare / faust, 1),
    }


if __name__ == "__main__":
    for key, value in run().items():
        print(f"faust stream: {key}: {value}")

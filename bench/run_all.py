"""Run every benchmark in bench/ and write one JSON + Markdown report with the machine's details.

    python bench/run_all.py [--only NAME ...] [--out bench/results]

Each bench module has a `run() -> dict` of numbers; timings are never asserted anywhere, only reported.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
BENCHES = [
    "bench_rules",
    "bench_store",
    "bench_ingest",
    "bench_ingest_steady",
    "bench_faust_stream",
    "bench_evaluator",
    "bench_api",
    "bench_dashboard",
    "bench_metrics_scrapes",
    "bench_lag_history",
    "bench_notifier",
    "bench_notifier_start",
    "bench_new_group_flood",
    "bench_event_codec",
    "bench_velocity",
    "bench_history",
    "bench_spark",
    "bench_vs_burrow",
]


def machine() -> dict:
    mem_kb = (
        next(
            (
                int(line.split()[1])
                for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")
            ),
            0,
        )
        if Path("/proc/meminfo").exists()
        else 0
    )
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", nargs="*", default=None, help="bench module names, e.g. bench_rules")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    report = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine(), "results": {}}
    for name in args.only or BENCHES:
        print(f"== {name}", flush=True)
        start = time.perf_counter()
        result = importlib.import_module(name).run()
        result["wall_seconds"] = round(time.perf_counter() - start, 1)
        report["results"][name] = result
        for key, value in result.items():
            print(f"   {key}: {value}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (args.out / f"bench-{stamp}.json").write_text(json.dumps(report, indent=2))
    lines = [f"# lagwatch benchmarks {report['started']}", "", f"Machine: `{json.dumps(report['machine'])}`", ""]
    for name, result in report["results"].items():
        lines += [f"## {name}", "", "| metric | value |", "| --- | --- |"]
        lines += [f"| {k} | {v} |" for k, v in result.items()] + [""]
    (args.out / f"bench-{stamp}.md").write_text("\n".join(lines))
    print(f"report: {args.out / f'bench-{stamp}.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The benchmarks run (`make bench`): each is timed by hand, never in the suite, so a change that breaks one would
go unseen until someone measures. These run the ones that drive whole services at a token size, and check the
numbers are there, not what they are (bench_notifier once failed at its first burst for months)."""

import importlib.util
import sys

from tests import paths


def bench(name: str):
    spec = importlib.util.spec_from_file_location(name, paths.ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as an import does: a dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def test_the_notifier_bench_runs_at_a_token_size():
    result = bench("bench_notifier").run(events=20, probes=2)
    assert result["events"] == 20 and result["notifications_per_second"] > 0
    assert result["latency_p50_ms"] > 0


def test_the_notifier_start_bench_runs_at_a_token_size(monkeypatch):
    monkeypatch.syspath_prepend(str(paths.ROOT / "bench"))  # it takes its events from bench_notifier
    result = bench("bench_notifier_start").run(incidents=20, subscriptions=2)
    assert result["incidents"] == 20 and result["first_tick_all_s"] > 0 and result["first_tick_unchanged_s"] > 0


def test_the_dashboard_bench_runs_at_a_token_size(monkeypatch):
    monkeypatch.syspath_prepend(str(paths.ROOT / "bench"))  # it takes the api's life cycle from bench_api
    result = bench("bench_dashboard").run(groups=300, partitions=2)
    assert result["groups"] == 300 and result["overview_rows"] > 0


def test_the_new_group_flood_bench_runs_at_a_token_size():
    result = bench("bench_new_group_flood").run(groups=200)
    assert [row["flood"] for row in result["rounds"]] == [0, 200]
    assert 0 < result["worst_alert_after_flood_s"] < float("inf")


def test_the_fleet_bench_runs_at_a_token_size(monkeypatch):
    monkeypatch.syspath_prepend(str(paths.ROOT / "bench"))  # it takes its parts from bench_scale and bench_vs_burrow
    result = bench("scale_fleet").run(groups=100, burrow=False, idle_s=1.0, lead_s=2.0)
    assert result["records"] == 800 and result["ingest_stored_s"] > 0 and result["cold_start_s"] > 0
    assert result["metrics_partitions_off_samples"] < result["metrics_partitions_on_samples"]
    assert result["lagwatch_partitions_on_total_peak_rss_mb"] > result["api_partitions_on_peak_rss_mb"] > 0
    assert result["sigterm_exit_code"] == 0 and result["sigkill_restart_first_stop_s"] > 0
    assert result["burrow"] == "skipped (--no-burrow)"

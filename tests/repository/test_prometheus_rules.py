"""deploy/prometheus/: the alert and recording rules pass `promtool check rules`, their unit tests
(lagwatch-rules.test.yml: what fires when, with which labels and text) pass `promtool test rules`, and a rule made
wrong is caught by them. The rules' queries run against a real Prometheus scraping lagwatch in
tests/repository/test_grafana_dashboard.py."""

import shutil
import subprocess
from pathlib import Path

import pytest

from tests import paths

RULES_DIR = paths.ROOT / "deploy" / "prometheus"


def promtool(*args: str, cwd: Path = RULES_DIR) -> subprocess.CompletedProcess:
    path = shutil.which("promtool")
    assert path, "promtool is missing: `make system-deps` installs it (Debian package prometheus)"
    return subprocess.run([path, *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_the_rules_are_valid_prometheus_rules():
    result = promtool("check", "rules", "lagwatch-rules.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_example_prometheus_configuration_loads_the_rules():
    result = promtool("check", "config", "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_rules_unit_tests_pass():
    result = promtool("test", "rules", "lagwatch-rules.test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize(
    ("original", "broken"),
    [
        ("max by (cluster, consumer_group) (burrow_kafka_consumer_status)", "burrow_kafka_consumer_status"),
        ("cluster_consumer_group:burrow_kafka_consumer_status:max >= 3\n        for: 5m", "x >= 3\n        for: 5m"),
        ("lagwatch_evaluator_schedule_delay_seconds > 30", "lagwatch_evaluator_schedule_delay_seconds > 60"),
        ('"consumer_group", "lagwatch-$1"', '"consumer_group", "lagwatch-ingest-$1"'),
        (
            "\n          or sum by (cluster, topic) (lagwatch_notifier_events_skipped_total\n"
            "            unless lagwatch_notifier_events_skipped_total offset 1h) > 0",
            "",
        ),
    ],
    ids=[
        "instance labels kept",
        "wrong series",
        "threshold moved",
        "not lagwatch's own group",
        "a skip counted before the first scrape missed",
    ],
)
def test_a_rule_made_wrong_fails_its_unit_tests(tmp_path, original, broken):
    rules = (RULES_DIR / "lagwatch-rules.yml").read_text()
    assert original in rules
    (tmp_path / "lagwatch-rules.yml").write_text(rules.replace(original, broken, 1))
    shutil.copy(RULES_DIR / "lagwatch-rules.test.yml", tmp_path)

    result = promtool("test", "rules", "lagwatch-rules.test.yml", cwd=tmp_path)

    assert result.returncode != 0 and "FAILED" in result.stdout + result.stderr

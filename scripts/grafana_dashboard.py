"""Writes deploy/grafana/lagwatch.json, lagwatch's Grafana dashboard, from the panel list below.

    python scripts/grafana_dashboard.py            # rewrite the file
    python scripts/grafana_dashboard.py --check    # exit 1 when the file is out of date

Panels query the series lagwatch exports (services/api/metrics.py and each service's own metrics); where the api
and a service both export a total (the api's is cluster-wide, from Redis), queries take `max by`, never a sum, so
scraping both counts nothing twice. tests/repository/test_grafana_dashboard.py runs every panel's query against a real
Prometheus scraping a running lagwatch.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "deploy" / "grafana" / "lagwatch.json"
DS = {"type": "prometheus", "uid": "${datasource}"}
GROUP = 'cluster=~"$cluster",consumer_group=~"$group"'
PARTITION = f'{GROUP},topic=~"$topic"'
CLUSTER = 'cluster=~"$cluster"'
STATUS_MAPPINGS = [  # Burrow's numbering (shared/protocol/types.py)
    {
        "type": "value",
        "options": {
            "0": {"text": "NOTFOUND", "color": "text", "index": 0},
            "1": {"text": "OK", "color": "green", "index": 1},
            "2": {"text": "WARN", "color": "yellow", "index": 2},
            "3": {"text": "ERR", "color": "red", "index": 3},
            "4": {"text": "STOP", "color": "red", "index": 4},
            "5": {"text": "STALL", "color": "red", "index": 5},
            "6": {"text": "REWIND", "color": "orange", "index": 6},
        },
    }
]
# lagwatch's own group `lagwatch-<cluster>` (its progress on the offsets topic), picked by joining on its name
SELF_GROUP_LAG_SECONDS = (
    f"max by (cluster) (lagwatch_consumer_group_max_lag_seconds{{{CLUSTER}}} and on (cluster, consumer_group) "
    f"label_replace(group by (cluster) (lagwatch_consumer_group_max_lag_seconds{{{CLUSTER}}}), "
    '"consumer_group", "lagwatch-$1", "cluster", "(.+)"))'
)


@dataclass
class Target:
    expr: str
    legend: str = ""
    instant: bool = False


@dataclass
class Panel:
    title: str
    kind: str  # Grafana panel type
    targets: list[Target]
    width: int = 12
    height: int = 8
    unit: str = ""
    description: str = ""
    options: dict = field(default_factory=dict)
    mappings: list = field(default_factory=list)
    thresholds: list | None = None


@dataclass
class Row:
    title: str
    panels: list[Panel]


def status_count(op: str, value: int, title: str, color: str) -> Panel:
    return Panel(
        title,
        "stat",
        [Target(f"sum(max by (cluster, consumer_group) (burrow_kafka_consumer_status{{{GROUP}}}) {op} bool {value})")],
        width=4,
        height=4,
        options={"colorMode": "background", "graphMode": "none", "textMode": "value"},
        thresholds=[{"color": "green", "value": None}, {"color": color, "value": 1}],
    )


ROWS = [
    Row(
        "Status overview",
        [
            Panel(
                "Groups",
                "stat",
                [Target(f"count(max by (cluster, consumer_group) (burrow_kafka_consumer_status{{{GROUP}}}))")],
                width=4,
                height=4,
                options={"graphMode": "none"},
            ),
            status_count("==", 1, "OK", "green"),
            status_count("==", 2, "WARN", "yellow"),
            status_count(">=", 3, "ERR", "red"),
            Panel(
                "lagwatch's own lag (ingest behind)",
                "stat",
                [Target(SELF_GROUP_LAG_SECONDS, "{{cluster}}")],
                width=8,
                height=4,
                unit="s",
                description="How far lagwatch's ingest is behind the offsets topic: the lag in seconds of its own"
                " group `lagwatch-<cluster>`. Statuses and lag on this dashboard are as old as that.",
                thresholds=[
                    {"color": "green", "value": None},
                    {"color": "yellow", "value": 30},
                    {"color": "red", "value": 60},
                ],
            ),
            Panel(
                "Group status",
                "state-timeline",
                [
                    Target(
                        f"max by (cluster, consumer_group) (burrow_kafka_consumer_status{{{GROUP}}})",
                        "{{consumer_group}}",
                    )
                ],
                width=24,
                height=9,
                description="Each group's status over time (Burrow's rules: WARN while the lag grows, ERR when a"
                " partition stopped, stalled or rewound).",
                options={"showValue": "never", "mergeValues": True, "rowHeight": 0.8},
                mappings=STATUS_MAPPINGS,
            ),
        ],
    ),
    Row(
        "Lag",
        [
            Panel(
                "Lag in seconds, by group",
                "timeseries",
                [
                    Target(
                        f"max by (cluster, consumer_group) (lagwatch_consumer_group_max_lag_seconds{{{GROUP}}})",
                        "{{consumer_group}}",
                    )
                ],
                unit="s",
                description="How long ago the log end passed the newest commit of the group's slowest partition.",
            ),
            Panel(
                "Total lag (messages), by group",
                "timeseries",
                [
                    Target(
                        f"max by (cluster, consumer_group) (burrow_kafka_consumer_lag_total{{{GROUP}}})",
                        "{{consumer_group}}",
                    )
                ],
                unit="short",
            ),
            Panel(
                "Lag in seconds, by partition",
                "timeseries",
                [
                    Target(
                        "max by (cluster, consumer_group, topic, partition) "
                        f"(lagwatch_consumer_lag_seconds{{{PARTITION}}})",
                        "{{consumer_group}} {{topic}}/{{partition}}",
                    )
                ],
                unit="s",
            ),
            Panel(
                "Lag (messages), by partition",
                "timeseries",
                [
                    Target(
                        "max by (cluster, consumer_group, topic, partition) "
                        f"(burrow_kafka_consumer_partition_lag{{{PARTITION}}})",
                        "{{consumer_group}} {{topic}}/{{partition}}",
                    )
                ],
                unit="short",
            ),
            Panel(
                "Lag growth (messages/s over 10 minutes), by group",
                "timeseries",
                [
                    Target(
                        f"deriv(max by (cluster, consumer_group) (burrow_kafka_consumer_lag_total{{{GROUP}}})[10m:])",
                        "{{consumer_group}}",
                    )
                ],
                width=24,
                unit="short",
                description="Above 0: the group falls behind; below: it catches up.",
            ),
        ],
    ),
    Row(
        "Worst partitions and incidents",
        [
            Panel(
                "Worst partitions by lag in seconds",
                "table",
                [
                    Target(
                        "topk(10, max by (cluster, consumer_group, topic, partition) "
                        f"(lagwatch_consumer_lag_seconds{{{PARTITION}}}))",
                        instant=True,
                    )
                ],
                unit="s",
            ),
            Panel(
                "Worst partitions by lag (messages)",
                "table",
                [
                    Target(
                        "topk(10, max by (cluster, consumer_group, topic, partition) "
                        f"(burrow_kafka_consumer_partition_lag{{{PARTITION}}}))",
                        instant=True,
                    )
                ],
                unit="short",
            ),
            Panel(
                "Open incidents: groups in WARN or ERR now",
                "table",
                [
                    Target(
                        f"max by (cluster, consumer_group) (burrow_kafka_consumer_status{{{GROUP}}}) >= 2", instant=True
                    )
                ],
                mappings=STATUS_MAPPINGS,
                description="lagwatch opens an incident when a group leaves OK and closes it when the group is OK"
                " again; the notifier tells the subscriptions both (docs: the notifier).",
            ),
            Panel(
                "Partitions not OK now",
                "table",
                [
                    Target(
                        "max by (cluster, consumer_group, topic, partition) "
                        f"(burrow_kafka_topic_partition_status{{{PARTITION}}}) >= 2",
                        instant=True,
                    )
                ],
                mappings=STATUS_MAPPINGS,
                description="Why a group is WARN or ERR: its partitions that are WARN, STOP, STALL or REWIND"
                " (partitions with a complete window of commits only, as Burrow exports them).",
            ),
            Panel(
                "Status changes and notifications",
                "timeseries",
                [
                    Target(
                        "max by (cluster) "
                        f"(increase(lagwatch_status_transitions_total{{{CLUSTER}}}[$__rate_interval]))",
                        "status changes {{cluster}}",
                    ),
                    Target(
                        "sum by (type, kind) (increase(lagwatch_notifier_notifications_total[$__rate_interval]))",
                        "{{kind}} via {{type}}",
                    ),
                ],
                unit="short",
            ),
        ],
    ),
    Row(
        "lagwatch's own health",
        [
            Panel(
                "Targets up",
                "state-timeline",
                [Target('up{job=~".*lagwatch.*"}', "{{job}} {{instance}}")],
                width=24,
                height=6,
                options={"showValue": "never", "mergeValues": True},
                mappings=[
                    {
                        "type": "value",
                        "options": {"0": {"text": "down", "color": "red"}, "1": {"text": "up", "color": "green"}},
                    }
                ],
            ),
            Panel(
                "Instances running, by service",
                "timeseries",
                [
                    Target(
                        f"max by (cluster, service) (lagwatch_service_instances{{{CLUSTER}}})",
                        "{{cluster}} {{service}}",
                    )
                ],
                unit="short",
                description="Ingest workers, evaluators and notifiers that say they run, as the api reads them from"
                " Redis: still said when a service's own targets are gone. Alert: LagwatchServiceNotRunning.",
            ),
            Panel(
                "Ingest: offsets-topic records read/s",
                "timeseries",
                [
                    Target(
                        f"max by (cluster) (rate(lagwatch_ingest_records_total{{{CLUSTER}}}[$__rate_interval]))",
                        "{{cluster}}",
                    )
                ],
                unit="short",
            ),
            Panel(
                "Ingest: commit clock offset, delay from a commit to its windows stored",
                "timeseries",
                [
                    Target(
                        f"max by (cluster, partition) (lagwatch_commit_clock_offset_seconds{{{CLUSTER}}})",
                        "offset {{cluster}} partition {{partition}}",
                    ),
                    Target(
                        "histogram_quantile(0.9, sum by (cluster, le) "
                        f"(rate(lagwatch_ingest_commit_delay_seconds_bucket{{{CLUSTER}}}[$__rate_interval])))",
                        "delay p90 {{cluster}}",
                    ),
                ],
                unit="s",
                description="How far commit timestamps (the group coordinators' clock) are behind lagwatch's clock,"
                " negative ahead (absent in admin mode); and the ingest's delay, the 90th percentile of each batch's"
                " slowest commit. Alerts: LagwatchCommitClockBehind, LagwatchCommitClockAhead, LagwatchIngestLate.",
            ),
            Panel(
                "Evaluator: evaluations/s by trigger",
                "timeseries",
                [
                    Target(
                        f"max by (cluster, trigger) (rate(lagwatch_evaluations_total{{{CLUSTER}}}[$__rate_interval]))",
                        "{{trigger}}",
                    )
                ],
                unit="short",
            ),
            Panel(
                "Evaluator: time since the last sweep, schedule delay, status events waiting for Kafka",
                "timeseries",
                [
                    Target(
                        f"time() - lagwatch_evaluator_last_sweep_timestamp_seconds{{{CLUSTER}}}",
                        "since last sweep {{instance}}",
                    ),
                    Target(
                        f"lagwatch_evaluator_sweep_interval_seconds{{{CLUSTER}}}",
                        "sweep interval {{instance}}",
                    ),
                    Target(
                        f"lagwatch_evaluator_schedule_delay_seconds{{{CLUSTER}}}",
                        "schedule delay {{instance}}",
                    ),
                    Target(
                        f"lagwatch_evaluator_unsent_events_seconds{{{CLUSTER}}}",
                        "events waiting {{instance}}",
                    ),
                ],
                unit="s",
                description="A sweep evaluates every group each evaluator.sweep-interval (the safety net); the schedule"
                " evaluates a group when its status is due to change; status events Kafka has not taken wait in the"
                " outbox (no alert goes out meanwhile). Alerts: LagwatchEvaluatorSweepsLate,"
                " LagwatchEvaluatorScheduleLate, LagwatchStatusEventsUnsent.",
            ),
            Panel(
                "Evaluator: groups waiting (new ones, a takeover's), new groups and groups over the cap a second",
                "timeseries",
                [
                    Target(f"lagwatch_evaluator_new_groups_waiting{{{CLUSTER}}}", "waiting {{instance}}"),
                    Target(f"lagwatch_evaluator_takeover_backlog{{{CLUSTER}}}", "takeover backlog {{instance}}"),
                    Target(
                        f"rate(lagwatch_evaluator_new_groups_total{{{CLUSTER}}}[$__rate_interval])",
                        "new/s {{instance}}",
                    ),
                    Target(
                        f"rate(lagwatch_evaluator_groups_over_cap_total{{{CLUSTER}}}[$__rate_interval])",
                        "over the cap/s {{instance}}",
                    ),
                ],
                unit="short",
                description="Groups lagwatch has no status for wait behind the known ones for their first evaluation;"
                " past evaluator.max-groups new groups are skipped. After a start or a rebalance, the groups of the"
                " changes partitions an instance took over wait to be caught up on, behind whatever is due (their"
                " schedule runs meanwhile). Alerts: LagwatchNewGroupsFlood, LagwatchGroupCapReached.",
            ),
            Panel(
                "Evaluator: rules' clock held behind",
                "timeseries",
                [Target(f"lagwatch_evaluator_clock_held_seconds{{{CLUSTER}}}", "{{instance}}")],
                unit="s",
                description="How far the rules' clock was behind the wall clock at the last evaluation: the ingest had"
                " not read the offsets topic that far, and no consumer can be found stopped meanwhile (rules.md"
                " section 3). Tenths of a second are normal. Alert: LagwatchRulesClockHeld.",
            ),
            Panel(
                "Evaluator: busy share",
                "timeseries",
                [
                    Target(
                        "sum by (instance, cluster) "
                        f"(rate(lagwatch_evaluation_seconds_sum{{{CLUSTER}}}[$__rate_interval]))",
                        "{{instance}}",
                    )
                ],
                unit="percentunit",
                description="The share of time an instance spends evaluating; near 100 % the schedule slips.",
            ),
            Panel(
                "Notifier: deliveries by result",
                "timeseries",
                [
                    Target(
                        "sum by (type, result) (increase(lagwatch_notifier_deliveries_total[$__rate_interval]))",
                        "{{result}} {{type}}",
                    )
                ],
                unit="short",
            ),
            Panel(
                "Notifier: dead letters (in the range)",
                "stat",
                [Target("sum by (type) (increase(lagwatch_notifier_dead_letters_total[$__range]))", "{{type}}")],
                unit="short",
                description="Notifications a destination refused or that failed notifier.max-attempts times: on the"
                " dead-letter topic; `lagwatch notify replay-dlq` sends them again.",
                thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 1}],
            ),
            Panel(
                "Notifier: events skipped (in the range)",
                "stat",
                [
                    Target(
                        f"sum by (topic) (increase(lagwatch_notifier_events_skipped_total{{{CLUSTER}}}[$__range]))",
                        "{{topic}}",
                    )
                ],
                unit="short",
                description="Events retention deleted before the notifiers read them (LagwatchNotifierEventsSkipped):"
                " keep lagwatch.status longer than notifier outages; the incidents were reconciled with the"
                " evaluator's statuses (docs/status-topic.md).",
                thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 1}],
            ),
            Panel(
                "Notifier: notifications held back (in the range)",
                "stat",
                [
                    Target(
                        "sum by (type, reason) (increase(lagwatch_notifier_held_total[$__range]))",
                        "{{reason}} {{type}}",
                    )
                ],
                unit="short",
                description="Notifications due while a silence held their group (sent when it ends, if the incident is"
                " still open) or before a subscription's hold-for passed (never sent if the status went back).",
            ),
            Panel(
                "Notifier: time from evaluation to request (p95)",
                "timeseries",
                [
                    Target(
                        "histogram_quantile(0.95, sum by (le, type) "
                        "(rate(lagwatch_notifier_delivery_latency_seconds_bucket[$__rate_interval])))",
                        "{{type}}",
                    )
                ],
                unit="s",
            ),
            Panel(
                "Scrape duration",
                "timeseries",
                [Target('scrape_duration_seconds{job=~".*lagwatch.*"}', "{{job}} {{instance}}")],
                unit="s",
                description="The api renders every group's and partition's series; near scrape_timeout scrapes fail"
                " (leave partition series out: api.metrics-partition-series and the api.metrics-* lists).",
            ),
            Panel(
                "Archiver: history records written/s",
                "timeseries",
                [
                    Target(
                        "sum by (cluster, outcome) "
                        f"(rate(lagwatch_archiver_records_total{{{CLUSTER}}}[$__rate_interval]))",
                        "{{outcome}} {{cluster}}",
                    )
                ],
                unit="short",
                description="With history.enabled: the records the archiver writes to Parquet for the Spark replay.",
            ),
        ],
    ),
]


def variable(name: str, label: str, query: str) -> dict:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "query": {"query": query, "refId": f"{name}-values"},
        "definition": query,
        "refresh": 2,  # on time range change
        "multi": True,
        "includeAll": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
    }


VARIABLES = [
    {
        "name": "datasource",
        "label": "Prometheus",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
    },
    variable("cluster", "Cluster", "label_values(burrow_kafka_consumer_status, cluster)"),
    variable(
        "group", "Consumer group", 'label_values(burrow_kafka_consumer_status{cluster=~"$cluster"}, consumer_group)'
    ),
    variable(
        "topic",
        "Topic",
        'label_values(burrow_kafka_consumer_partition_lag{cluster=~"$cluster",consumer_group=~"$group"}, topic)',
    ),
]


def panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict:
    defaults: dict = {"unit": panel.unit} if panel.unit else {}
    if panel.mappings:
        defaults["mappings"] = panel.mappings
    if panel.thresholds:
        defaults["thresholds"] = {"mode": "absolute", "steps": panel.thresholds}
        defaults["color"] = {"mode": "thresholds"}
    doc = {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "datasource": DS,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": panel.options,
        "targets": [
            {
                "datasource": DS,
                "refId": chr(ord("A") + i),
                "expr": t.expr,
                "legendFormat": t.legend or "__auto",
                "instant": t.instant,
                "range": not t.instant,
                **({"format": "table"} if t.instant else {}),
            }
            for i, t in enumerate(panel.targets)
        ],
    }
    if panel.description:
        doc["description"] = panel.description
    if panel.kind == "table":
        doc["transformations"] = [{"id": "organize", "options": {"excludeByName": {"Time": True}}}]
    return doc


def dashboard() -> dict:
    panels, panel_id, y = [], 1, 0
    for row in ROWS:
        panels.append(
            {
                "id": panel_id,
                "type": "row",
                "title": row.title,
                "collapsed": False,
                "panels": [],
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
            }
        )
        panel_id, y, x, line_height = panel_id + 1, y + 1, 0, 0
        for panel in row.panels:
            if x + panel.width > 24:
                x, y, line_height = 0, y + line_height, 0
            panels.append(panel_json(panel, panel_id, x, y))
            panel_id, x, line_height = panel_id + 1, x + panel.width, max(line_height, panel.height)
        y += line_height
    return {
        "title": "lagwatch: Kafka consumer lag",
        "uid": "lagwatch",
        "description": "Consumer groups watched by lagwatch (status, lag, lag in seconds, incidents) and lagwatch's own"
        " health. Generated by scripts/grafana_dashboard.py.",
        "tags": ["kafka", "consumer-lag", "lagwatch"],
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "timezone": "",
        "templating": {"list": VARIABLES},
        "annotations": {"list": []},
        "links": [],
        "panels": panels,  # every query's data source is the `datasource` variable: import asks for nothing
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is out of date: run python scripts/grafana_dashboard.py", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

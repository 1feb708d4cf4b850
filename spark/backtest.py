"""Backtesting rule configurations: the same history replayed under several settings, counting the alerts each would
have raised, so a team can tune away noisy alerts before changing production. Pure functions.

A variant names any of the storage/evaluator options that change a status (`intervals`, `min-distance`,
`allowed-lag`, `minimum-complete`) and the notification options of a subscription (`threshold`, `send-close`,
`send-once`, `send-interval`); what it leaves out comes from the job's configuration. A variants file (YAML)::

    variants:
      - {name: production}                                  # the configuration as it is
      - {name: patient, intervals: 20, min-distance: 30}
      - {name: errors-only, threshold: ERR, send-close: false}
      - {name: tolerant, allowed-lag: 1000, minimum-complete: 0.5}

Notifications are decided by the notifier's own policy (`decide`), so the counts are what a subscription with
those options would really have received: opens, updates, closes, and repeats every `send-interval` while an
announced incident stays at or above the threshold.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from lagwatch.shared.events.status_event import StatusEvent
from lagwatch.shared.notifications.subscriptions.notification_policy import Kind, Policy, decide
from lagwatch.shared.protocol.types import RuleConfig, Status
from lagwatch.shared.runtime.config import THRESHOLDS, Config
from lagwatch.spark.replay import ReplayConfig

VARIANT_KEYS = (
    "name",
    "intervals",
    "min-distance",
    "allowed-lag",
    "minimum-complete",
    "minimum-entries",
    "threshold",
    "send-close",
    "send-once",
    "send-interval",
)


class BacktestError(ValueError):
    pass


@dataclasses.dataclass(frozen=True, slots=True)
class Variant:
    name: str
    replay: ReplayConfig
    policy: Policy


class VariantCounts(NamedTuple):
    status_changes: int
    incidents: int  # incidents the subscription was told about (open notifications)
    notifications: int  # everything sent: open + update + close + status + repeats
    opens: int
    updates: int
    closes: int
    repeats: int


def variants_from_document(doc: Any, config: Config, tick_ms: int) -> list[Variant]:
    """Variants from a parsed variants file; BacktestError names the bad entry and key."""
    items = doc.get("variants") if isinstance(doc, Mapping) else None
    if not isinstance(items, list) or not items:
        raise BacktestError("a variants file needs a non-empty list `variants`")
    variants = [_variant(i, item, config, tick_ms) for i, item in enumerate(items)]
    names = [v.name for v in variants]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise BacktestError(f"variant names must be unique: {', '.join(duplicates)}")
    return variants


def load_variants(path: Path, config: Config, tick_ms: int) -> list[Variant]:
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise BacktestError(f"cannot read the variants file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise BacktestError(f"variants file {path} is not valid YAML: {exc}") from None
    return variants_from_document(doc, config, tick_ms)


def production_variant(config: Config, tick_ms: int) -> Variant:
    return _variant(0, {"name": "production"}, config, tick_ms)


def _variant(index: int, item: Any, config: Config, tick_ms: int) -> Variant:
    where = f"variants[{index}]"
    if not isinstance(item, Mapping) or not isinstance(item.get("name"), str) or not item["name"]:
        raise BacktestError(f"{where}: needs a `name`")
    unknown = sorted(set(item) - set(VARIANT_KEYS))
    if unknown:
        raise BacktestError(f"{where} ({item['name']}): unknown option {', '.join(unknown)}")
    window = config.window()
    try:
        intervals = _number(item, "intervals", window.intervals, int, minimum=1)
        min_distance_ms = int(_number(item, "min-distance", window.min_distance_ms / 1000, float, minimum=0) * 1000)
        allowed_lag = _number(item, "allowed-lag", config.evaluator.allowed_lag, int, minimum=0)
        minimum_complete = _number(item, "minimum-complete", config.evaluator.minimum_complete, float, minimum=0)
        minimum_entries = _number(item, "minimum-entries", config.evaluator.minimum_entries, int, minimum=1)
        send_interval = _number(item, "send-interval", 0.0, float, minimum=0)
    except BacktestError as exc:
        raise BacktestError(f"{where} ({item['name']}): {exc}") from None
    threshold = item.get("threshold", "WARN")
    if threshold not in THRESHOLDS:
        raise BacktestError(f"{where} ({item['name']}): threshold must be one of {', '.join(THRESHOLDS)}")
    for flag in ("send-close", "send-once"):
        if flag in item and not isinstance(item[flag], bool):
            raise BacktestError(f"{where} ({item['name']}): {flag} must be true or false")
    return Variant(
        name=item["name"],
        replay=ReplayConfig(
            window=dataclasses.replace(window, intervals=intervals, min_distance_ms=min_distance_ms),
            rules=RuleConfig(allowed_lag, minimum_complete, minimum_entries),
            tick_ms=tick_ms,
        ),
        policy=Policy(
            threshold=Status[threshold],
            send_close=item.get("send-close", True),
            send_once=item.get("send-once", False),
            send_interval_ms=int(send_interval * 1000),
        ),
    )


def _number(item: Mapping, key: str, default: float, kind: type, *, minimum: float) -> Any:
    value = item.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or (kind is int and not isinstance(value, int)):
        raise BacktestError(f"{key} must be {'an integer' if kind is int else 'a number'}")
    if value < minimum:
        raise BacktestError(f"{key} must be >= {minimum}")
    return kind(value)


def count_notifications(policy: Policy, events: Sequence[StatusEvent], end_ms: int) -> VariantCounts:
    """Feed a group's status-change events to a subscription's policy and count what it would have sent."""
    tally = dict.fromkeys(Kind, 0)
    state = None
    repeat_at: int | None = None
    for event in events:
        repeat_at = _repeats_until(policy, repeat_at, event.evaluated_at, tally)
        decision = decide(policy, event, state, event.evaluated_at)
        if decision.kind is not None:
            tally[decision.kind] += 1
        state, repeat_at = decision.state, decision.repeat_at
    _repeats_until(policy, repeat_at, end_ms, tally)
    return VariantCounts(
        status_changes=len(events),
        incidents=tally[Kind.OPEN],
        notifications=sum(tally.values()),
        opens=tally[Kind.OPEN],
        updates=tally[Kind.UPDATE],
        closes=tally[Kind.CLOSE],
        repeats=tally[Kind.REPEAT],
    )


def _repeats_until(policy: Policy, repeat_at: int | None, until: int, tally: dict) -> int | None:
    """Count the repeats the notifier's timer would have sent before `until`; the next one's time. (`decide` only
    schedules a repeat for an announced incident at or above the threshold.)"""
    if repeat_at is None or not policy.repeats or repeat_at >= until:
        return repeat_at
    due = (until - repeat_at - 1) // policy.send_interval_ms + 1
    tally[Kind.REPEAT] += due
    return repeat_at + due * policy.send_interval_ms

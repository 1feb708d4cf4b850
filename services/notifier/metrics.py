"""The notifier's Prometheus metrics (served on its HealthServer's /metrics)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

EVENTS = Counter(
    "lagwatch_notifier_events_total", "Status-change events read by the notifier", ["outcome"]
)  # outcome: handled, duplicate, malformed, failed
NOTIFICATIONS = Counter("lagwatch_notifier_notifications_total", "Notifications put into the outbox", ["type", "kind"])
DELIVERIES = Counter(
    "lagwatch_notifier_deliveries_total", "Deliveries finished, by result", ["type", "result"]
)  # result: delivered, dead_lettered, dropped (subscription deleted)
ATTEMPTS = Counter("lagwatch_notifier_attempts_total", "HTTP requests sent", ["type", "outcome"])
RETRIES = Counter("lagwatch_notifier_retries_total", "Failed attempts scheduled for a retry", ["type", "reason"])
DEAD_LETTERS = Counter(
    "lagwatch_notifier_dead_letters_total", "Deliveries published on the dead-letter topic", ["type"]
)
HELD = Counter(
    "lagwatch_notifier_held_total",
    "Notifications held back when due (sent later, or never if the incident ends)",
    ["type", "reason"],
)  # reason: silence, hold_for (holds.py)
DEFERRED = Counter(
    "lagwatch_notifier_deferred_total", "Deliveries put back without an attempt", ["reason"]
)  # reason: circuit_open, host_busy, host_paused
CIRCUIT_OPENED = Counter("lagwatch_notifier_circuit_opened_total", "Times a destination's circuit breaker opened")
OPEN_CIRCUITS = Gauge("lagwatch_notifier_open_circuits", "Destinations whose circuit breaker is open")
DELIVERY_LATENCY = Histogram(
    "lagwatch_notifier_delivery_latency_seconds",
    "From the event's evaluation (evaluated_at) to the first request for it",
    ["type"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
REQUEST_SECONDS = Histogram(
    "lagwatch_notifier_request_seconds",
    "HTTP request duration",
    ["type"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
EVENTS_SKIPPED = Counter(
    "lagwatch_notifier_events_skipped_total",
    "Events retention deleted before the notifier read them (its position fell off the log)",
    ["cluster", "topic"],
)
RECONCILED = Counter(
    "lagwatch_notifier_reconciled_total",
    "Incident states set right from the evaluator's statuses after skipped events, per subscription",
    ["action"],
)  # action: close, open

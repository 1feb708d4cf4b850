"""The notifier's Prometheus metrics (served on its HealthServer's /metrics), each named lagwatch_notifier_<name>.

Label values: events' `outcome` handled, duplicate, malformed, failed; deliveries' `result` delivered, dead_lettered,
dropped (subscription deleted); held's `reason` silence, hold_for (holds.py); deferred's `reason` circuit_open,
host_busy, host_paused; reconciled's `action` close, open."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram


def _counter(name: str, documentation: str, *labels: str) -> Counter:
    return Counter(f"lagwatch_notifier_{name}_total", documentation, labels)


def _seconds(name: str, documentation: str, *buckets: float) -> Histogram:
    return Histogram(f"lagwatch_notifier_{name}_seconds", documentation, ["type"], buckets=buckets)


EVENTS = _counter("events", "Status-change events read by the notifier", "outcome")
NOTIFICATIONS = _counter("notifications", "Notifications put into the outbox", "type", "kind")
DELIVERIES = _counter("deliveries", "Deliveries finished, by result", "type", "result")
ATTEMPTS = _counter("attempts", "HTTP requests sent", "type", "outcome")
RETRIES = _counter("retries", "Failed attempts scheduled for a retry", "type", "reason")
DEAD_LETTERS = _counter("dead_letters", "Deliveries published on the dead-letter topic", "type")
HELD_DOC = "Notifications held back when due (sent later, or never if the incident ends)"
HELD = _counter("held", HELD_DOC, "type", "reason")
DEFERRED = _counter("deferred", "Deliveries put back without an attempt", "reason")
CIRCUIT_OPENED = _counter("circuit_opened", "Times a destination's circuit breaker opened")
OPEN_CIRCUITS = Gauge("lagwatch_notifier_open_circuits", "Destinations whose circuit breaker is open")
LATENCY_DOC = "From the event's evaluation (evaluated_at) to the first request for it"
DELIVERY_LATENCY = _seconds(
    "delivery_latency", LATENCY_DOC, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300
)
REQUEST_SECONDS = _seconds("request", "HTTP request duration", 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
SKIPPED_DOC = "Events retention deleted before the notifier read them (its position fell off the log)"
EVENTS_SKIPPED = _counter("events_skipped", SKIPPED_DOC, "cluster", "topic")
RECONCILED_DOC = "Incident states set right from the evaluator's statuses after skipped events, per subscription"
RECONCILED = _counter("reconciled", RECONCILED_DOC, "action")

"""The notifier service (`lagwatch run notifier`): status-change and lag-threshold events -> notifications.

service.py (Faust app, agents, repeat timer) · events.py (an event's decisions per subscription) · holds.py
(silences, hold-for) · lag_policy.py (lag-seconds incidents) · outbox.py (Redis outbox) · delivery.py (HTTP,
retries, per-destination queues, circuit breakers) · channels/ (one module per destination type) · messages.py
(Slack Block Kit, webhook bodies) · templates.py + template_worker.py (sandboxed Jinja2, bounded, off the loop) ·
burrow_helpers.py (Burrow's template helpers) ·
tls.py · subscriptions.py (model, api store, masking) · dlq.py (dead letters, replay) · metrics.py.
Shared with other processes: Burrow's notification rules (shared/notification_policy.py, also the Spark backtest's)
and request signing (shared/signing.py, also the dev kit's receiver). Docs: docs/webhooks.md.
"""

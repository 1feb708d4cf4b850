"""The notifier service (`lagwatch run notifier`): status-change and lag-threshold events -> notifications.

service.py (Faust app, agents, repeat timer) · events.py (an event's decisions per subscription) · holds.py
(silences, hold-for) · lag_policy.py (lag-seconds incidents) · scope.py (incidents a subscription no longer
covers) · outbox.py (Redis outbox) · delivery.py (HTTP,
retries, per-destination queues, circuit breakers) · channels/ (one module per destination type: what it sends) ·
messages.py (Slack Block Kit, webhook bodies) · subscriptions.py (compiled subscriptions, the registry) · dlq.py
(dead letters, replay) · metrics.py.
Shared with other processes (shared/): Burrow's notification rules (notification_policy.py, also the Spark
backtest's), request signing (signing.py, also the dev kit's receiver), and what the api checks subscriptions with
too: subscriptions/ (the stored document, masking, the Redis store, validation, each destination type's options),
templating/ (sandboxed Jinja2 and Burrow's helpers, in budgeted workers off the loop) and tls.py (extra-ca,
noverify). Docs: docs/webhooks.md.
"""

"""The notifier service (`lagwatch run notifier`): status-change and lag-threshold events -> notifications.

service.py (wiring on the one Service base) · agents.py (the topics' records, a batch at a time) · events.py (the two
kinds of event) · event_batches.py (a batch's decisions and records) · decisions.py (one subscription's decision and
its record) · holds.py (silences, hold-for) · lag_policy.py (lag and retention alerts) · missed.py and reconcile.py
(events never read) · scope.py and scope_watch.py (incidents a subscription no longer or newly covers) · repeats.py
(the repeat timer) · outbox.py (Redis outbox) · delivery.py (HTTP, retries, per-destination queues, circuit
breakers) · messages.py (a delivery's request) · channels/ (one module per destination type, Slack and webhooks
too: what it sends) · subscriptions.py (compiled subscriptions, the registry) · dlq.py (dead letters, replay) ·
sample.py (a sample incident on demand) · metrics.py.
Shared with other processes (shared/notifications/): Burrow's notification rules, request signing, what the api checks
subscriptions with too (subscriptions/: the stored document, masking, the Redis store, validation, each destination
type's options), templating/ (sandboxed Jinja2 and Burrow's helpers, in budgeted workers off the loop) and TLS.
Docs: docs/webhooks.md.
"""

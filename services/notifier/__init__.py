"""The notifier service (`lagwatch run notifier`): status-change events -> Slack and webhook notifications.

service.py (Faust app, agent, repeat timer) · policy.py (Burrow's rules, pure) · outbox.py (Redis outbox) ·
delivery.py (HTTP, retries, per-destination queues, circuit breakers) · messages.py (Slack Block Kit, webhook
bodies) · templates.py (sandboxed Jinja2) · signing.py (X-Lagwatch-Signature) · subscriptions.py (model, api
store, masking) · targets.py (SSRF guard) · dlq.py (dead letters, replay) · metrics.py. Docs: docs/webhooks.md.
"""

"""The notifier service (`lagwatch run notifier`): status-change and lag-threshold events -> notifications.

service.py wires it on the one Service base; agents.py, event_batches.py and decisions.py record what each event
means (events.py, holds.py, lag_policy.py, missed.py, scope.py decide), repeats.py, scope_watch.py and reconcile.py
record what time and changes mean; outbox.py keeps it, delivery.py sends it, messages.py and channels/ render it.
Shared with the api: shared/notifications/. Docs: docs/webhooks.md.
"""

"""Who is told what, and when, as the api, the evaluator and the notifier all see it: subscription documents and
their store, notification policy, alert thresholds, silences. The model itself is `SubscriptionConfig`
(shared/runtime/config.py); what only the notifier runs stays in services/notifier/subscriptions.py.
"""

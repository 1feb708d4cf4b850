"""Who is told what, and when, as the api, the evaluator and the notifier all see it: the stored subscription
document, its masked view and Redis store; Burrow's notification policy (notification_policy.py); the alert
thresholds in force (lag_threshold_index.py); silences (silences.py).

The model itself is `SubscriptionConfig` (shared/runtime/config.py). What only the notifier runs — compiling a
subscription into its policy and group filter, the registry it serves from — stays in
services/notifier/subscriptions.py.
"""

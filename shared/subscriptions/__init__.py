"""Subscriptions as the api and the notifier both see them: the stored document, its masked view, the Redis store.

The model itself is `SubscriptionConfig` (shared/config.py). What only the notifier runs — compiling a subscription
into its policy and group filter, the registry it serves from — stays in services/notifier/subscriptions.py.
"""

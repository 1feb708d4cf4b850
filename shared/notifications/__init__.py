"""Where an event becomes a notification, as the api, the evaluator and the notifier all see it: subscriptions and
their policy, silences and thresholds (subscriptions/), templates (templating/), safe delivery (delivery/), and
sample requests."""

"""The api service: Burrow's HTTP API v3 over the Redis windows, lagwatch's own routes (subscriptions, silences,
the dashboard), health checks and Prometheus metrics; `service` builds the application."""

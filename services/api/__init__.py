"""The api service: Burrow's HTTP API v3 over the Redis windows, health checks and Prometheus metrics.

Modules: `service` (the aiohttp Application and the service), `burrow_routes` (/v3/kafka/...), `health_routes`
(Burrow's /burrow/admin; /healthz and /readyz are the Service base's), `metrics` (/metrics) and `scrape_process`
(its worker process), `middleware` (JSON errors, timing), `auth` (bearer token for DELETE), `statuses` (the rules at
request time), `context` (what handlers share), `notices` (change notices after a DELETE), `responses` (Burrow's
envelope). `/readyz` reports whether Kafka is there (`shared/runtime/kafka_probe.py`).
"""

"""The api service: Burrow's HTTP API v3 over the Redis windows, health checks and Prometheus metrics.

Modules: `app` (the aiohttp Application and the server), `burrow_routes` (/v3/kafka/...), `health_routes`
(/burrow/admin, /healthz, /readyz), `metrics` (/metrics) and `scrape_process` (its worker process), `middleware`
(JSON errors, timing), `auth` (bearer token for DELETE), `statuses` (the rules at request time), `context` (what
handlers share), `notices` (change notices after a DELETE), `responses` (Burrow's envelope). Readiness asks
`shared/runtime/kafka_probe.py` whether Kafka is there.
"""

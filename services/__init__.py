"""The services: ingest, evaluator, notifier, api and archiver. Each meets the others only at Redis keys and Kafka
topics."""

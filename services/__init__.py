"""The services: ingest, evaluator, notifier and api. Each meets the others only at Redis keys and Kafka topics."""

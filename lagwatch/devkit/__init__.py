"""Embedded local infrastructure for tests and `make run`: a Redis server process and the Kafka mock cluster."""

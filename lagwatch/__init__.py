"""lagwatch: Kafka consumer-lag monitoring with Burrow's rules, as event-driven services."""

__version__ = "0.1.0"

"""Kafka plumbing every process shares: client settings and logins, the Faust apps' broker settings, keyed batch
sends, the `__consumer_offsets` record codec, the group-changes topic and the readiness probe (`kafka_probe`)."""

"""Kafka plumbing every process shares: client settings and logins, the Faust apps' broker settings, keyed batch
sends, the `__consumer_offsets` record codec and the group-changes topic."""

"""The dev kit: what runs lagwatch on one machine for `lagwatch dev up`, the tests and the benchmarks.

A real Redis server process, librdkafka's mock Kafka cluster, an `__consumer_offsets` writer and its record encoders,
the demo system and its workload, and a webhook receiver. Not part of the services' library (`lagwatch.shared`): no
service imports it; only the CLI's `lagwatch dev ...` commands do.
"""

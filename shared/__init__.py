"""What two or more lagwatch processes share, cut by stage of the flow (docs/architecture.md):

records/ → windows/ → statuses/ → events/ → notifications/, each stage importing only the stages before it, all
resting on protocol/ (the exchanged types, Redis keys) and runtime/ (configuration, clock, Redis and Kafka clients,
the service life cycle). No service imports another; they meet at Redis keys and Kafka topics.
"""

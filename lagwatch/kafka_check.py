"""`lagwatch check-kafka`: connect to a configured cluster the way the services do (TLS, SASL login) and say what
lagwatch can see there, so a managed cluster's settings can be tried before anything runs.

A token login (OAUTHBEARER, AWS_MSK_IAM) is tried first on its own: its failure names the endpoint and its reason,
which librdkafka would report only as a failed SASL handshake.
"""

from __future__ import annotations

import logging
from typing import Any

from lagwatch.shared.runtime.config import ClusterConfig
from lagwatch.shared.runtime.kafka_client import TOKEN_MECHANISMS, librdkafka_config
from lagwatch.shared.runtime.kafka_login import LoginError, token_provider

# librdkafka's own log lines (a FAIL per connection attempt) go here, not to stderr: the answer is one line
_LIBRDKAFKA_LOG = logging.getLogger("lagwatch.kafka_check.librdkafka")
_LIBRDKAFKA_LOG.addHandler(logging.NullHandler())
_LIBRDKAFKA_LOG.propagate = False


class CheckError(RuntimeError):
    """The cluster could not be reached or logged in to; the message says which and why."""


def check_cluster(cluster: ClusterConfig, name: str, timeout: float = 10.0) -> dict[str, Any]:
    """Brokers, the Kafka cluster id, topic count and whether the offsets topic is visible, read with the cluster's
    own settings."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    report: dict[str, Any] = {"cluster": name, "login": cluster.sasl.mechanism or "none"}
    if cluster.sasl.mechanism in TOKEN_MECHANISMS:
        try:
            token = token_provider(cluster, name).current()
        except LoginError as exc:
            raise CheckError(f"cluster {name}: login failed: {exc}") from None
        report["principal"] = token.principal
    config = librdkafka_config(cluster, name)
    errors: list[str] = []
    admin_config: dict[str, Any] = {**config, "error_cb": lambda error: errors.append(error.str())}
    admin = AdminClient(admin_config, logger=_LIBRDKAFKA_LOG)
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        admin.poll(0)  # serves error_cb: the broker's own reason (connection refused, SSL or SASL failure)
        seen = f" ({errors[-1]})" if errors else ""
        raise CheckError(f"cluster {name}: no answer within {timeout:g} s: {exc.args[0].str()}{seen}") from None
    report["brokers"] = sorted(f"{b.host}:{b.port}" for b in metadata.brokers.values())
    # the ingest records it: another one behind the name later is a replaced cluster (services/ingest/kafka_identity.py)
    report["cluster_id"] = metadata.cluster_id
    report["topics"] = len(metadata.topics)
    report["offsets_topic_visible"] = cluster.offsets_topic in metadata.topics
    report["offsets_source"] = cluster.offsets_source
    return report

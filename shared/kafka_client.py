"""Kafka client settings from a cluster's configuration: bootstrap servers, client id, TLS and SASL.

One place turns `ClusterConfig` into keyword arguments for aiokafka's clients, so every service connects to a real
cluster the same way (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL with PLAIN / SCRAM-SHA-256 / SCRAM-SHA-512).
"""

from __future__ import annotations

import ssl
from typing import Any

from lagwatch.shared.config import ClusterConfig, ConfigError


def security_protocol(cluster: ClusterConfig) -> str:
    if cluster.sasl.mechanism:
        return "SASL_SSL" if cluster.tls.enabled else "SASL_PLAINTEXT"
    return "SSL" if cluster.tls.enabled else "PLAINTEXT"


def ssl_context(cluster: ClusterConfig, name: str = "cluster") -> ssl.SSLContext | None:
    """A TLS context from the CA file and client certificate; None when TLS is off."""
    tls = cluster.tls
    if not tls.enabled:
        return None
    try:
        context = ssl.create_default_context(cafile=tls.ca_file or None)
        if tls.cert_file:
            context.load_cert_chain(tls.cert_file, tls.key_file or None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"clusters.{name}.tls", f"cannot load certificates: {exc}") from None
    context.check_hostname = tls.verify_hostname
    return context


def client_kwargs(cluster: ClusterConfig, name: str = "cluster") -> dict[str, Any]:
    """Keyword arguments every aiokafka client (consumer, producer, admin) accepts."""
    kwargs: dict[str, Any] = {
        "bootstrap_servers": ",".join(cluster.bootstrap_servers),
        "client_id": cluster.client_id,
        "security_protocol": security_protocol(cluster),
        "ssl_context": ssl_context(cluster, name),
    }
    if cluster.sasl.mechanism:
        if not cluster.sasl.username:
            raise ConfigError(f"clusters.{name}.sasl.username", "required when a SASL mechanism is set")
        kwargs.update(
            sasl_mechanism=cluster.sasl.mechanism,
            sasl_plain_username=cluster.sasl.username,
            sasl_plain_password=cluster.sasl.password,
        )
    return kwargs


def librdkafka_config(cluster: ClusterConfig, name: str = "cluster") -> dict[str, Any]:
    """The same connection for librdkafka clients (confluent-kafka): the ingest reads the offsets topic with one,
    whose C fetch path costs a fraction of aiokafka's per record."""
    config: dict[str, Any] = {
        "bootstrap.servers": ",".join(cluster.bootstrap_servers),
        "client.id": cluster.client_id,
        "security.protocol": security_protocol(cluster).lower(),
    }
    tls = cluster.tls
    if tls.enabled:
        ssl_context(cluster, name)  # the same early, clear error for unreadable certificates
        config["ssl.endpoint.identification.algorithm"] = "https" if tls.verify_hostname else "none"
        if tls.ca_file:
            config["ssl.ca.location"] = tls.ca_file
        if tls.cert_file:
            config["ssl.certificate.location"] = tls.cert_file
            if tls.key_file:
                config["ssl.key.location"] = tls.key_file
    if cluster.sasl.mechanism:
        if not cluster.sasl.username:
            raise ConfigError(f"clusters.{name}.sasl.username", "required when a SASL mechanism is set")
        config.update(
            {
                "sasl.mechanism": cluster.sasl.mechanism,
                "sasl.username": cluster.sasl.username,
                "sasl.password": cluster.sasl.password,
            }
        )
    return config

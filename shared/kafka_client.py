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

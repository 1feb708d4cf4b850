"""Kafka client settings from a cluster's configuration: bootstrap servers, client id, TLS and SASL.

One place turns `ClusterConfig` into keyword arguments for aiokafka's clients and a configuration for librdkafka's,
so every service connects to a real cluster the same way (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL with PLAIN,
SCRAM-SHA-256/512, OAUTHBEARER from an OIDC token endpoint, AWS_MSK_IAM, or GSSAPI). OAUTHBEARER and AWS_MSK_IAM
are both SASL OAUTHBEARER on the wire: they differ in where the token comes from (shared/runtime/kafka_login.py).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import ssl
from typing import Any

from lagwatch.shared.runtime.config import ClusterConfig, ConfigError, OAuthConfig, SaslConfig, TlsConfig
from lagwatch.shared.runtime.kafka_login import token_provider

TOKEN_MECHANISMS = ("OAUTHBEARER", "AWS_MSK_IAM")  # SASL OAUTHBEARER with a token provider
PASSWORD_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


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
    return {
        "bootstrap_servers": ",".join(cluster.bootstrap_servers),
        "client_id": cluster.client_id,
        "security_protocol": security_protocol(cluster),
        "ssl_context": ssl_context(cluster, name),
        **_aiokafka_sasl(cluster, name),
    }


def check_login(cluster: ClusterConfig, name: str) -> None:
    """The same checks as loading the configuration, for a `ClusterConfig` built in code."""
    problem = cluster.cross_check()
    if problem:
        raise ConfigError(f"clusters.{name}.{problem[0]}", problem[1])


def _aiokafka_sasl(cluster: ClusterConfig, name: str) -> dict[str, Any]:
    check_login(cluster, name)
    sasl = cluster.sasl
    if sasl.mechanism in PASSWORD_MECHANISMS:
        return {
            "sasl_mechanism": sasl.mechanism,
            "sasl_plain_username": sasl.username,
            "sasl_plain_password": sasl.password,
        }
    if sasl.mechanism in TOKEN_MECHANISMS:
        return {"sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": token_provider(cluster, name)}
    if sasl.mechanism == "GSSAPI":
        kerberos_for_aiokafka(cluster, name)
        return {
            "sasl_mechanism": "GSSAPI",
            "sasl_kerberos_service_name": sasl.kerberos.service_name,
            "sasl_kerberos_domain_name": sasl.kerberos.domain_name or None,
        }
    return {}


def gssapi_installed() -> bool:
    return importlib.util.find_spec("gssapi") is not None


def kerberos_for_aiokafka(cluster: ClusterConfig, name: str) -> None:
    """aiokafka logs in with the `gssapi` package and the process's default credentials; a keytab becomes the
    client keytab of MIT Kerberos ($KRB5_CLIENT_KTNAME), from which it gets tickets by itself."""
    if not gssapi_installed():
        raise ConfigError(
            f"clusters.{name}.sasl.mechanism",
            "GSSAPI needs the `gssapi` package (pip install 'lagwatch[kerberos]'; building it needs libkrb5-dev)",
        )
    keytab = cluster.sasl.kerberos.keytab
    if keytab:
        if not os.access(keytab, os.R_OK):
            raise ConfigError(f"clusters.{name}.sasl.kerberos.keytab", f"cannot read {keytab}")
        current = os.environ.get("KRB5_CLIENT_KTNAME")
        if current and current != keytab:
            raise ConfigError(
                f"clusters.{name}.sasl.kerberos.keytab", f"$KRB5_CLIENT_KTNAME already names another keytab ({current})"
            )
        os.environ["KRB5_CLIENT_KTNAME"] = keytab


@functools.cache
def librdkafka_has_gssapi() -> bool:
    """Whether the loaded librdkafka was built with Kerberos (the confluent-kafka wheels are not)."""
    from confluent_kafka import KafkaException, Producer

    try:
        Producer({"security.protocol": "sasl_plaintext", "sasl.mechanism": "GSSAPI"})
    except KafkaException as exc:
        if "GSSAPI" in str(exc):
            return False
        raise
    return True


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
    config.update(_librdkafka_sasl(cluster, name))
    return config


def _librdkafka_sasl(cluster: ClusterConfig, name: str) -> dict[str, Any]:
    check_login(cluster, name)
    sasl = cluster.sasl
    if sasl.mechanism in PASSWORD_MECHANISMS:
        return {"sasl.mechanism": sasl.mechanism, "sasl.username": sasl.username, "sasl.password": sasl.password}
    if sasl.mechanism in TOKEN_MECHANISMS:
        return {"sasl.mechanism": "OAUTHBEARER", "oauth_cb": token_provider(cluster, name).oauth_cb}
    if sasl.mechanism == "GSSAPI":
        if not librdkafka_has_gssapi():
            raise ConfigError(
                f"clusters.{name}.sasl.mechanism",
                "GSSAPI: the librdkafka of this confluent-kafka build has no Kerberos; install confluent-kafka "
                "built against a librdkafka with libsasl2 (see docs/managed-kafka.md)",
            )
        k = sasl.kerberos
        config = {"sasl.mechanism": "GSSAPI", "sasl.kerberos.service.name": k.service_name}
        if k.principal:
            config["sasl.kerberos.principal"] = k.principal
        if k.keytab:
            config["sasl.kerberos.keytab"] = k.keytab
        return config
    return {}


def java_client_options(cluster: ClusterConfig, name: str = "cluster") -> dict[str, str]:
    """The same connection as properties of Kafka's Java client (Spark's kafka source takes them with a `kafka.`
    prefix). MSK IAM needs the aws-msk-iam-auth jar on the classpath; OIDC needs Kafka 3.4 or later."""
    check_login(cluster, name)
    props = {"bootstrap.servers": ",".join(cluster.bootstrap_servers), "security.protocol": security_protocol(cluster)}
    if cluster.tls.enabled:
        props.update(_java_tls_options(cluster.tls, name))
    props.update(_java_sasl_options(cluster.sasl))
    return props


def _java_tls_options(tls: TlsConfig, name: str) -> dict[str, str]:
    props: dict[str, str] = {}
    if not tls.verify_hostname:
        props["ssl.endpoint.identification.algorithm"] = ""
    if tls.ca_file:
        props.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": tls.ca_file})
    if tls.cert_file:  # PEM keystores as text: the Java client reads no separate key file
        props["ssl.keystore.type"] = "PEM"
        props["ssl.keystore.certificate.chain"] = _pem(tls.cert_file, name, "cert-file")
        props["ssl.keystore.key"] = _pem(tls.key_file or tls.cert_file, name, "key-file")
    return props


def _java_sasl_options(sasl: SaslConfig) -> dict[str, str]:
    m = sasl.mechanism
    if not m:
        return {}
    props: dict[str, str] = {}
    if m in PASSWORD_MECHANISMS:
        module = "plain.PlainLoginModule" if m == "PLAIN" else "scram.ScramLoginModule"
        props["sasl.jaas.config"] = _jaas(module, username=sasl.username, password=sasl.password)
    elif m == "OAUTHBEARER":
        props.update(_java_oauth_options(sasl.oauth))
    elif m == "AWS_MSK_IAM":
        aws = sasl.aws
        options = {"awsProfileName": aws.profile} if aws.profile else {}
        if aws.role_arn:
            options["awsRoleArn"] = aws.role_arn
        props["sasl.jaas.config"] = _jaas("software.amazon.msk.auth.iam.IAMLoginModule", **options)
        props["sasl.client.callback.handler.class"] = "software.amazon.msk.auth.iam.IAMClientCallbackHandler"
    elif m == "GSSAPI":
        k = sasl.kerberos
        props["sasl.kerberos.service.name"] = k.service_name
        options = {"useTicketCache": "true"}
        if k.keytab:
            options = {"useKeyTab": "true", "storeKey": "true", "keyTab": k.keytab}
        if k.principal:
            options["principal"] = k.principal
        props["sasl.jaas.config"] = _jaas("com.sun.security.auth.module.Krb5LoginModule", **options)
    props["sasl.mechanism"] = m
    return props


def _java_oauth_options(o: OAuthConfig) -> dict[str, str]:
    extensions = {f"extension_{k}": v for k, v in o.extensions.items()}
    return {
        "sasl.oauthbearer.token.endpoint.url": o.token_endpoint_url,
        "sasl.login.callback.handler.class": (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
        ),
        "sasl.jaas.config": _jaas(
            "oauthbearer.OAuthBearerLoginModule",
            clientId=o.client_id,
            clientSecret=o.client_secret,
            **({"scope": o.scope} if o.scope else {}),
            **extensions,
        ),
    }


def _jaas(module: str, **options: str) -> str:
    """A JAAS line: Kafka's own login modules by their short name under org.apache.kafka.common.security."""
    if not module.startswith(("com.", "software.")):
        module = f"org.apache.kafka.common.security.{module}"
    quoted = "".join(f' {k}="{_jaas_escape(v)}"' for k, v in options.items())
    return f"{module} required{quoted};"


def _jaas_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _pem(path: str, name: str, option: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError as exc:
        raise ConfigError(f"clusters.{name}.tls.{option}", f"cannot read {path}: {exc.strerror}") from None

"""SASL OAUTHBEARER tokens for every Kafka client lagwatch opens: from an OIDC token endpoint (client-credentials
grant) or signed with AWS credentials for MSK IAM (`aws-msk-iam-sasl-signer-python`).

One provider per cluster and process serves both client libraries: aiokafka (and Faust through it) awaits
`token()` (`AbstractTokenProvider`), librdkafka (confluent-kafka) calls `oauth_cb` from its own threads. So the
provider is synchronous underneath, with a lock, and the aiokafka side runs a fetch on a thread: Faust's consumer
lives on an event loop of its own, which an HTTP session bound to one loop could not serve.

A token is kept until 80% of its lifetime has passed (librdkafka's own rule), so connections opened in between
share it, and none gets a token about to lapse. A refused login (HTTP 401, no AWS credentials) is
a `LoginError` naming the endpoint and client, never the secret, logged; the clients treat it as they treat an
unreachable broker and try again.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from aiokafka.abc import AbstractTokenProvider
from aiokafka.errors import KafkaConnectionError
from prometheus_client import Counter

from lagwatch.shared.runtime.config import AwsIamConfig, ClusterConfig, ConfigError, OAuthConfig

log = logging.getLogger(__name__)
LOGINS = Counter(
    "lagwatch_kafka_logins_total", "Kafka login tokens fetched (OAUTHBEARER, AWS_MSK_IAM)", ["cluster", "outcome"]
)

REFRESH_AT = 0.8  # of a token's lifetime: then a new one is fetched
DEFAULT_LIFETIME_S = 300.0  # a token whose endpoint names no lifetime (no expires_in, no JWT exp)
HTTP_TIMEOUT_S = 10.0
RETRY_S = 10.0  # after a failed login, librdkafka asks again this soon
LOGIN_FAILED = "lagwatch-login-failed"  # the placeholder token librdkafka gets while no login succeeds


class LoginError(RuntimeError):
    """A token could not be had: the endpoint refused the client, was unreachable, or answered nonsense."""


@dataclass(frozen=True)
class Token:
    value: str
    expires_at: float  # seconds since the epoch
    principal: str  # who the token says lagwatch is (librdkafka requires a name)
    refresh_at: float = 0.0  # when a new one is fetched


class TokenProvider(AbstractTokenProvider):  # type: ignore[misc]  # aiokafka ships no types
    """Caches a token and fetches a new one before it expires; subclasses say how to fetch."""

    def __init__(self, *, cluster: str = "", clock: Callable[[], float] = time.time) -> None:
        self.cluster = cluster
        self._clock = clock
        self._lock = threading.Lock()
        self._token: Token | None = None
        self._failed: tuple[float, LoginError] | None = None  # (until when, the error) after a failed login
        self.failures = 0  # failed logins librdkafka was told nothing of (it would fail its client)

    def _fetch(self) -> Token:
        raise NotImplementedError

    def current(self) -> Token:
        """The cached token, or a new one when it is due for refresh (blocking: HTTP or AWS calls)."""
        with self._lock:
            token = self._token
            if token is None or self._clock() >= token.refresh_at:
                if self._failed is not None and self._clock() < self._failed[0]:
                    raise self._failed[1]  # the same answer for RETRY_S: reconnecting clients do not flood the IdP
                try:
                    fresh = self._fetch()
                except LoginError as exc:
                    self._failed = (self._clock() + RETRY_S, exc)
                    LOGINS.labels(self.cluster, "failed").inc()
                    raise
                self._failed = None
                LOGINS.labels(self.cluster, "ok").inc()
                now = self._clock()
                token = self._token = replace(fresh, refresh_at=now + max(fresh.expires_at - now, 0.0) * REFRESH_AT)
            return token

    # aiokafka's AbstractTokenProvider
    async def token(self) -> str:
        token = self._token
        if token is not None and self._clock() < token.refresh_at:
            return token.value
        try:
            return (await asyncio.to_thread(self.current)).value
        except LoginError as exc:  # a connection failure to aiokafka: it retries, as with an unreachable broker
            log.error("Kafka login failed: %s", exc)
            raise KafkaConnectionError(f"SASL login: {exc}") from None

    # librdkafka's `oauth_cb`: (token, expiry in seconds since the epoch, principal, extensions)
    def oauth_cb(self, _oauthbearer_config: str) -> tuple[str, float, str, dict[str, str]]:
        """Never raises: confluent-kafka turns an exception here into a failed client constructor (it waits for a
        first token) and the message into "OAuth callback raised exception". So a failed login is logged here, and
        librdkafka gets the last token while it is valid, else a placeholder the brokers refuse; either lapses
        within RETRY_S, when librdkafka asks again."""
        try:
            token = self.current()
            return token.value, token.expires_at, token.principal, self.extensions()
        except LoginError as exc:
            log.error("Kafka login failed: %s", exc)
            self.failures += 1
            now, last = self._clock(), self._token
            if last is not None and last.expires_at > now + RETRY_S:
                return last.value, now + RETRY_S, last.principal, self.extensions()
            return LOGIN_FAILED, now + RETRY_S, LOGIN_FAILED, {}


class OidcClientCredentials(TokenProvider):
    """Tokens from an OIDC provider's token endpoint with the client-credentials grant (RFC 6749 4.4); the client
    authenticates with HTTP basic auth (2.3.1), as librdkafka's and Kafka's Java OIDC logins do."""

    def __init__(self, oauth: OAuthConfig, *, cluster: str = "", clock: Callable[[], float] = time.time) -> None:
        super().__init__(cluster=cluster, clock=clock)
        self.oauth = oauth

    def extensions(self) -> dict[str, str]:
        return dict(self.oauth.extensions)

    def _fetch(self) -> Token:
        o = self.oauth
        form = {"grant_type": "client_credentials", **({"scope": o.scope} if o.scope else {})}
        basic = f"{urllib.parse.quote(o.client_id, safe='')}:{urllib.parse.quote(o.client_secret, safe='')}"
        request = urllib.request.Request(
            o.token_endpoint_url,
            data=urllib.parse.urlencode(form).encode(),
            headers={
                "Authorization": "Basic " + base64.b64encode(basic.encode()).decode(),
                "Content-Type": "application/x-www-form-urlencoded",
                "Accept": "application/json",
            },
            method="POST",
        )
        where = f"token endpoint {o.token_endpoint_url} (client-id {o.client_id})"
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as answer:
                body = answer.read(1 << 20)
        except urllib.error.HTTPError as exc:
            raise LoginError(f"{where} refused the login: HTTP {exc.code}{_oauth_error(exc)}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise LoginError(f"{where} unreachable: {getattr(exc, 'reason', exc)}") from None
        try:
            doc = json.loads(body)
            value = doc["access_token"]
            if not isinstance(value, str) or not value:
                raise TypeError
        except (ValueError, KeyError, TypeError):
            raise LoginError(f"{where} answered without an access_token") from None
        claims = _jwt_claims(value)
        expires_in = doc.get("expires_in")
        if isinstance(expires_in, int | float) and not isinstance(expires_in, bool) and expires_in > 0:
            expires_at = self._clock() + float(expires_in)
        elif isinstance(claims.get("exp"), int | float):
            expires_at = float(claims["exp"])
        else:
            expires_at = self._clock() + DEFAULT_LIFETIME_S
        principal = str(claims.get("sub") or o.client_id)
        log.info(
            "Kafka login: token for %s from %s, valid %.0f s",
            principal,
            o.token_endpoint_url,
            expires_at - self._clock(),
        )
        return Token(value, expires_at, principal)


class MskIamTokens(TokenProvider):
    """MSK IAM tokens: a presigned `kafka-cluster:Connect` request, signed by the AWS signer library with the
    credentials of the default chain, a named profile, or an assumed role. Signing needs no network (assuming a
    role calls STS)."""

    def __init__(
        self, aws: AwsIamConfig, where: str = "sasl.aws", *, cluster: str = "", clock: Callable[[], float] = time.time
    ) -> None:
        super().__init__(cluster=cluster, clock=clock)
        self.aws = aws
        self.region = aws_region(aws, where)

    def _fetch(self) -> Token:
        import botocore.exceptions
        from aws_msk_iam_sasl_signer import MSKAuthTokenProvider as signer

        try:
            if self.aws.role_arn:
                value, expiry_ms = signer.generate_auth_token_from_role_arn(self.region, self.aws.role_arn)
            elif self.aws.profile:
                value, expiry_ms = signer.generate_auth_token_from_profile(self.region, self.aws.profile)
            else:
                value, expiry_ms = signer.generate_auth_token(self.region)
        except AttributeError:  # the signer dereferences credentials it did not find
            raise LoginError(f"MSK IAM: no AWS credentials found{_aws_source(self.aws)}") from None
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError, ValueError) as exc:
            raise LoginError(f"MSK IAM: cannot sign a token{_aws_source(self.aws)}: {exc}") from None
        return Token(value, expiry_ms / 1000.0, self.aws.role_arn or self.aws.profile or "aws")


def aws_region(aws: AwsIamConfig, where: str = "sasl.aws") -> str:
    """The configured region, else the usual AWS environment variables, else the profile's region."""
    region = aws.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not region:
        import botocore.session

        region = botocore.session.Session(profile=aws.profile or None).get_config_variable("region")
    if not region:
        raise ConfigError(f"{where}.region", "no region: set it, $AWS_REGION, or a region in the AWS profile")
    return region


_providers: dict[tuple[str, str], TokenProvider] = {}
_providers_lock = threading.Lock()


def token_provider(cluster: ClusterConfig, name: str) -> TokenProvider:
    """The process's provider for the cluster's login (OAUTHBEARER or AWS_MSK_IAM): every client of the cluster
    shares its token."""
    mechanism = cluster.sasl.mechanism
    settings = cluster.sasl.oauth if mechanism == "OAUTHBEARER" else cluster.sasl.aws
    key = (name, repr(settings))  # a changed login (a reloaded secret) gets a provider of its own
    with _providers_lock:
        provider = _providers.get(key)
        if provider is None:
            if mechanism == "OAUTHBEARER":
                provider = OidcClientCredentials(cluster.sasl.oauth, cluster=name)
            elif mechanism == "AWS_MSK_IAM":
                provider = MskIamTokens(cluster.sasl.aws, f"clusters.{name}.sasl.aws", cluster=name)
            else:
                raise ValueError(f"mechanism {mechanism} takes no token provider")
            _providers[key] = provider
        return provider


def _oauth_error(exc: urllib.error.HTTPError) -> str:
    """The endpoint's `error` and `error_description` (RFC 6749 5.2), when it sent them."""
    try:
        doc = json.loads(exc.read(1 << 16))
    except (ValueError, OSError):
        return ""
    if not isinstance(doc, dict) or not doc.get("error"):
        return ""
    description = f" ({doc['error_description']})" if doc.get("error_description") else ""
    return f": {doc['error']}{description}"


def _jwt_claims(value: str) -> dict[str, Any]:
    """The claims of a JWT access token, unverified (the broker verifies it); {} for an opaque token."""
    parts = value.split(".")
    if len(parts) != 3:
        return {}
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, binascii.Error):
        return {}
    return claims if isinstance(claims, dict) else {}


def _aws_source(aws: AwsIamConfig) -> str:
    if aws.role_arn:
        return f" (assuming role {aws.role_arn})"
    if aws.profile:
        return f" (profile {aws.profile})"
    return " (environment, shared credentials file, or instance role)"

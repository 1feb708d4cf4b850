"""Webhook request signatures: what the notifier sends and how a receiver checks it (docs/webhooks.md).

Every webhook request carries::

    X-Lagwatch-Event-Id:  <id>            dedupe key: the same notification always has the same id
    X-Lagwatch-Timestamp: <unix seconds>  when this attempt was signed
    X-Lagwatch-Signature: v1=<hex>        HMAC-SHA256(secret, f"{timestamp}.{body}") (only when a secret is set)

The timestamp is inside the signed text, so a receiver that refuses old timestamps (`tolerance_s`) and remembers
the event ids it has seen for that long rejects replays of a captured request.

`verify_signature` raises `SignatureError` with one of these `code`s:

* `malformed` — the timestamp is not an integer, or the signature is not `v1=<64 hex digits>` (several
  comma-separated values are allowed, for secret rotation: one matching `v1` value is enough)
* `stale_timestamp` — the timestamp is further than `tolerance_s` from now (either direction)
* `bad_signature` — no value matches: wrong secret, or the body or timestamp was altered
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time

SCHEME = "v1"
EVENT_ID_HEADER = "X-Lagwatch-Event-Id"
TIMESTAMP_HEADER = "X-Lagwatch-Timestamp"
SIGNATURE_HEADER = "X-Lagwatch-Signature"
DEFAULT_TOLERANCE_S = 300
_HEX64 = re.compile(r"^[0-9a-f]{64}$")

MALFORMED = "malformed"
STALE_TIMESTAMP = "stale_timestamp"
BAD_SIGNATURE = "bad_signature"


class SignatureError(ValueError):
    """Verification failed; `code` is MALFORMED, STALE_TIMESTAMP or BAD_SIGNATURE."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


def _as_bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else value


def compute(secret: str | bytes, timestamp: int | str, body: str | bytes) -> str:
    """The hex HMAC-SHA256 of `<timestamp>.<body>` under `secret`."""
    message = str(timestamp).encode() + b"." + _as_bytes(body)
    return hmac.new(_as_bytes(secret), message, hashlib.sha256).hexdigest()


def sign(secret: str | bytes, timestamp: int, body: str | bytes) -> str:
    """The X-Lagwatch-Signature header value."""
    return f"{SCHEME}={compute(secret, timestamp, body)}"


def verify_signature(
    secret: str | bytes,
    timestamp: str | int | None,
    body: str | bytes,
    signature: str | None,
    *,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    now: float | None = None,
) -> None:
    """Return when the request is authentic and fresh; raise SignatureError(code) otherwise."""
    try:
        ts = int(str(timestamp).strip())
    except ValueError:
        raise SignatureError(MALFORMED, "X-Lagwatch-Timestamp is not an integer") from None
    candidates = []
    for part in (signature or "").split(","):
        scheme, _, value = part.strip().partition("=")
        if scheme == SCHEME and _HEX64.match(value.strip().lower()):
            candidates.append(value.strip().lower())
    if not candidates:
        raise SignatureError(MALFORMED, "X-Lagwatch-Signature has no v1=<64 hex digits> value")
    current = time.time() if now is None else now
    if abs(current - ts) > tolerance_s:
        raise SignatureError(
            STALE_TIMESTAMP, f"timestamp is {current - ts:.0f}s away from now (tolerance {tolerance_s}s)"
        )
    expected = compute(secret, ts, body)
    if not any(hmac.compare_digest(expected, c) for c in candidates):
        raise SignatureError(BAD_SIGNATURE, "no signature matches the body and timestamp")

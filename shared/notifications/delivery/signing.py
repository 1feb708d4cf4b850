"""Webhook request signatures: what the notifier sends and how a receiver checks it (docs/webhooks.md, the headers
and `SignatureError` codes).

The signature is HMAC-SHA256(secret, f"{timestamp}\n{event_id}\n{kind}\n" + body): everything a receiver acts on,
so a captured request re-sent with another event id or kind no longer verifies, and a receiver that refuses old
timestamps (`tolerance_s`) and remembers the event ids it saw for that long rejects replays.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Mapping

SCHEME = "v2"
EVENT_ID_HEADER = "X-Lagwatch-Event-Id"
KIND_HEADER = "X-Lagwatch-Notification"
TIMESTAMP_HEADER = "X-Lagwatch-Timestamp"
SIGNATURE_HEADER = "X-Lagwatch-Signature"
REASON_HEADER = "X-Lagwatch-Reason"  # not signed: why a close is not the group's own, or `test` (notify test)
DEFAULT_TOLERANCE_S = 300
_HEX64 = re.compile(r"^[0-9a-f]{64}\Z")

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


def compute(secret: str | bytes, timestamp: int | str, event_id: str, kind: str, body: str | bytes) -> str:
    """The hex HMAC-SHA256 of `<timestamp>\\n<event id>\\n<kind>\\n<body>` under `secret`. (Header values cannot
    hold a line break, so the parts cannot be shifted from one into another.)"""
    message = f"{timestamp}\n{event_id}\n{kind}\n".encode() + _as_bytes(body)
    return hmac.new(_as_bytes(secret), message, hashlib.sha256).hexdigest()


def sign(secret: str | bytes, timestamp: int, event_id: str, kind: str, body: str | bytes) -> str:
    """The X-Lagwatch-Signature header value."""
    return f"{SCHEME}={compute(secret, timestamp, event_id, kind, body)}"


def verify_request(
    secret: str | bytes,
    headers: Mapping[str, str],
    body: str | bytes,
    *,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    now: float | None = None,
) -> None:
    """`verify_signature` with the values read from the request's headers (a case-insensitive mapping)."""
    verify_signature(
        secret,
        headers.get(TIMESTAMP_HEADER),
        headers.get(EVENT_ID_HEADER) or "",
        headers.get(KIND_HEADER) or "",
        body,
        headers.get(SIGNATURE_HEADER),
        tolerance_s=tolerance_s,
        now=now,
    )


def verify_signature(
    secret: str | bytes,
    timestamp: str | int | None,
    event_id: str,
    kind: str,
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
        raise SignatureError(MALFORMED, f"X-Lagwatch-Signature has no {SCHEME}=<64 hex digits> value")
    current = time.time() if now is None else now
    if abs(current - ts) > tolerance_s:
        raise SignatureError(
            STALE_TIMESTAMP, f"timestamp is {current - ts:.0f}s away from now (tolerance {tolerance_s}s)"
        )
    expected = compute(secret, ts, event_id, kind, body)
    if not any(hmac.compare_digest(expected, c) for c in candidates):
        raise SignatureError(BAD_SIGNATURE, "no signature matches the timestamp, event id, kind and body")

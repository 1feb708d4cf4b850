"""HTTPS on the api's own listener: `api.tls-cert-file` (PEM chain) and `api.tls-key-file` (empty when the
certificate file holds the key), so the bearer token never travels in clear, without a proxy in front.

TLS 1.2 or newer. A missing or mismatched file stops the api at start with one line naming the option; the files
are loaded again whenever they change (a renewed certificate is served from the next connection on, without a
restart), and a renewal caught half-written is logged and tried again, the certificate in use served meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl

from lagwatch.shared.runtime.config import ApiConfig, ConfigError
from lagwatch.shared.runtime.service_lifecycle import pause

log = logging.getLogger(__name__)
RELOAD_CHECK_S = 30.0


def server_context(api: ApiConfig) -> ssl.SSLContext | None:
    """The listener's TLS context, or None for plain HTTP (no `tls-cert-file`); ConfigError naming the option."""
    if not api.tls_cert_file:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load(context, api)
    return context


def _load(context: ssl.SSLContext, api: ApiConfig) -> None:
    for option, path in (("tls-cert-file", api.tls_cert_file), ("tls-key-file", api.tls_key_file)):
        if path and not os.access(path, os.R_OK):
            reason = "no such file" if not os.path.exists(path) else "not readable"
            raise ConfigError(f"api.{option}", f"{path}: {reason}")
    try:
        context.load_cert_chain(api.tls_cert_file, api.tls_key_file or None)
    except (ssl.SSLError, OSError) as exc:
        problem = "not a PEM certificate with its private key, or the key is not the certificate's"
        raise ConfigError("api.tls-cert-file", f"{problem} ({exc.__class__.__name__}: {exc})") from None


def _stamp(api: ApiConfig) -> tuple[float, ...]:
    """When the files last changed (a missing one: -1, so that its return counts as a change)."""
    paths = [p for p in (api.tls_cert_file, api.tls_key_file) if p]
    return tuple(os.stat(p).st_mtime if os.path.exists(p) else -1.0 for p in paths)


async def reload_on_change(context: ssl.SSLContext, api: ApiConfig, stopping: asyncio.Event) -> None:
    seen = _stamp(api)
    while not stopping.is_set():
        await pause(stopping, RELOAD_CHECK_S)
        now = _stamp(api)
        if stopping.is_set() or now == seen:
            continue
        try:
            _load(ssl.create_default_context(ssl.Purpose.CLIENT_AUTH), api)  # tried apart: a failed load may leave
            _load(context, api)  # a context with the new certificate and the old key
        except ConfigError as exc:  # half-written, or wrong: the certificate in use stays
            log.warning("api: the TLS certificate changed but cannot be loaded (%s); still serving the previous", exc)
            continue
        seen = now
        log.info("api: TLS certificate reloaded from %s", api.tls_cert_file)

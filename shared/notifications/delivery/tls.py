"""TLS for a subscription's https requests: Burrow's `extra-ca` (CAs trusted besides the system's) and `noverify`.

`extra-ca` is PEM text, or — in the configuration file only — the path of a PEM file: the api accepts PEM text
alone, so a token holder cannot make the notifier open files of its host. Contexts are built once per value and
kept (a changed file is read again after a restart).
"""

from __future__ import annotations

import functools
import ssl
from pathlib import Path

PEM_BEGIN = "-----BEGIN CERTIFICATE-----"
CONTEXTS_KEPT = 64


class TlsProblem(ValueError):
    """An extra-ca that cannot be used."""


def is_pem(extra_ca: str) -> bool:
    return PEM_BEGIN in extra_ca


@functools.lru_cache(maxsize=CONTEXTS_KEPT)
def client_context(extra_ca: str, noverify: bool) -> ssl.SSLContext | bool:
    """What aiohttp's `ssl=` takes: True (the system's CAs), False (no checks at all, as Burrow's `noverify`), or a
    context trusting the system's CAs and `extra_ca`'s. TlsProblem when the CAs cannot be read."""
    if noverify:
        return False
    if not extra_ca:
        return True
    context = ssl.create_default_context()
    try:
        if is_pem(extra_ca):
            context.load_verify_locations(cadata=extra_ca)
        else:
            context.load_verify_locations(cafile=str(Path(extra_ca)))
    except (OSError, ssl.SSLError, ValueError) as exc:
        where = "extra-ca" if is_pem(extra_ca) else f"extra-ca {extra_ca}"
        raise TlsProblem(f"{where}: no usable CA certificate ({type(exc).__name__}: {exc})") from None
    return context

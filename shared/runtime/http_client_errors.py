"""Requests aiohttp's HTTP parser refuses are the client's fault: one WARNING line, never an ERROR with a traceback.

aiohttp answers a request line or header over 8190 bytes, more than 128 headers, an unknown HTTP version or a
method outside llhttp's table with a short plain-text 400 before any application code runs, and logs each one as
"Error handling request" at ERROR with the parser's traceback. Anyone who can reach a port could fill the log with
those and set off alerts on ERROR lines. `quiet_client_errors()` installs a filter on aiohttp's server logger that
turns such records into one WARNING line: the client's address and the first 200 characters of the parser's reason
(which shows an excerpt of the input as an escaped bytes literal). Errors of the server's own making stay as they
are.
"""

from __future__ import annotations

import logging

from aiohttp.http_exceptions import HttpProcessingError

SERVER_LOGGER = "aiohttp.server"
REASON_CHARS = 200


class ClientErrorsInOneLine(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError) and 400 <= (exc.code or 0) < 500:
            reason = " ".join((exc.message or type(exc).__name__).split())[:REASON_CHARS]
            record.msg = f"{record.getMessage()}: refused with {exc.code} ({type(exc).__name__}: {reason})"
            record.args = ()
            record.exc_info = record.exc_text = None
            if record.levelno > logging.WARNING:  # (aiohttp logs some at DEBUG already: they stay there)
                record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def quiet_client_errors() -> None:
    """Install the filter once per process (every lagwatch HTTP server calls this as it starts)."""
    logger = logging.getLogger(SERVER_LOGGER)
    if not any(isinstance(f, ClientErrorsInOneLine) for f in logger.filters):
        logger.addFilter(ClientErrorsInOneLine())

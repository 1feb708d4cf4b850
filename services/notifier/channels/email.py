"""`email`: a plain-text mail per notification, over SMTP with STARTTLS and AUTH (aiosmtplib;
docs/webhooks.md#other-destinations).

Plain text only, so no markup for a name to inject; the subject's names have their control characters escaped, so a
group named "x\\r\\nBcc: ..." adds no header. The SMTP host is resolved here and judged by the address guard, and
the socket connected to an allowed address is handed to aiosmtplib, so DNS rebinding cannot move it. Connection
failures, timeouts and 4xx replies are retried (the breaker counts the first two); 5xx replies are dead-lettered.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

import aiosmtplib

from lagwatch.services.notifier.channels import Channel, Notification, SendFailure, summary
from lagwatch.shared.notifications.delivery import address_guard, signing, tls
from lagwatch.shared.notifications.subscriptions.destinations import EMAIL, IMPLICIT_TLS_PORT, guard_url
from lagwatch.shared.runtime.printable import printable


@dataclass(frozen=True)
class Mail:
    """What an email delivery sends: the message and where (built fresh for every attempt, like a Request)."""

    host: str
    port: int
    message: EmailMessage
    username: str
    password: str
    starttls: bool
    extra_ca: str = ""  # CAs trusted besides the system's, as for https (tls.py)
    noverify: bool = False
    timeout_s: float = 0.0  # the subscription's own `timeout`; 0: the notifier's request-timeout


def text(note: Notification) -> bytes:
    """The text of a mail without a body-template; names' control characters escaped: a name adds no line."""
    event = note.event
    lines = [summary.title(event, note.kind, note.reason), ""]
    lines += [f"{name}: {value}" for name, value in summary.facts(event, note.kind, note.duration_s)]
    worst = summary.worst_lines(event, note.kind)
    if worst:
        lines += ["", "Worst partitions:", *(f"  {line}" for line in worst)]
    if note.dashboard_url:
        lines += ["", f"Open in lagwatch: {note.link}"]
    return ("\n".join(printable(line) for line in lines) + "\n").encode()


def build(note: Notification, text: str) -> Mail:
    """The mail of one attempt, saying `text` (the default text, or the rendered body-template)."""
    config, kind, timestamp = note.config, note.kind, note.now_ms // 1000
    title = printable(summary.title(note.event, kind, note.reason))  # a header's one line, whatever the names
    message = EmailMessage()
    message["Subject"] = f"[lagwatch] {title}"
    message["From"] = config.from_
    message["To"] = ", ".join(config.to)
    message["Date"] = formatdate(timestamp, usegmt=True)
    message["Message-ID"] = make_msgid("lagwatch")
    message[signing.EVENT_ID_HEADER] = note.notification_id  # the receiver's dedupe key, as for webhooks
    message[signing.KIND_HEADER] = kind
    message["X-Lagwatch-Subscription"] = config.id
    message["X-Lagwatch-Attempt"] = str(note.attempt)
    if note.reason:  # a close that is not the group's own, or a test: as the webhooks' header
        message[signing.REASON_HEADER] = note.reason
    message.set_content(text)
    if config.secret:  # over the text with LF line ends (SMTP carries CRLF: a receiver turns them back first)
        body = message.get_content().replace("\r\n", "\n").encode()
        message[signing.TIMESTAMP_HEADER] = str(timestamp)
        message[signing.SIGNATURE_HEADER] = signing.sign(config.secret, timestamp, note.notification_id, kind, body)
    host = address_guard.parse_target(guard_url(config)).host
    login = (config.username, config.password, config.starttls)
    return Mail(host, config.smtp_port, message, *login, config.extra_ca, config.noverify, config.timeout)


async def guarded_socket(host: str, port: int, *, allow_private: bool, timeout: float) -> socket.socket:
    """A socket connected to an address of `host` the guard allows (the first that answers)."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise SendFailure(f"cannot resolve {host}: {exc}", retryable=True, host_failure=True) from None
    allowed = [i for i in infos if address_guard.address_problem(str(i[4][0]), allow_private=allow_private) is None]
    if not allowed:
        problem = address_guard.address_problem(str(infos[0][4][0]), allow_private=allow_private)
        raise SendFailure(f"target refused: {host}: {problem}", retryable=False)
    last: OSError | None = None
    for family, type_, proto, _, address in allowed:
        sock = socket.socket(family, type_, proto)
        sock.setblocking(False)
        try:
            await asyncio.wait_for(loop.sock_connect(sock, address), timeout)
            return sock
        except (OSError, TimeoutError) as exc:
            sock.close()
            last = exc if isinstance(exc, OSError) else OSError(f"timeout after {timeout}s")
    raise SendFailure(f"connection failed: {last}", retryable=True, host_failure=True)


async def send(mail: Mail, *, timeout_s: float, allow_private: bool) -> None:
    """Send one mail; SendFailure says whether to retry."""
    timeout_s = mail.timeout_s or timeout_s
    try:
        trust = tls.client_context(mail.extra_ca, mail.noverify)  # True: the system's CAs; False: no checks
    except tls.TlsProblem as exc:
        raise SendFailure(str(exc), retryable=False) from None
    sock = await guarded_socket(mail.host, mail.port, allow_private=allow_private, timeout=timeout_s)
    implicit_tls = mail.port == IMPLICIT_TLS_PORT
    try:
        client = aiosmtplib.SMTP(
            hostname=mail.host,
            sock=sock,
            timeout=timeout_s,
            use_tls=implicit_tls,
            start_tls=mail.starttls and not implicit_tls,  # True: STARTTLS or fail (never falls back to clear text)
            validate_certs=trust is not False,
            tls_context=trust if isinstance(trust, ssl.SSLContext) else None,
        )
    except Exception:
        sock.close()
        raise
    try:  # from here on the socket is the connection's: closing the connection closes it
        await client.connect()
        if mail.username:
            await client.login(mail.username, mail.password)
        errors, _ = await client.send_message(mail.message)
        if errors:  # some recipients refused, the others accepted: retrying would send them a second copy
            raise SendFailure(f"recipients refused: {', '.join(sorted(errors))}", retryable=False)
    except aiosmtplib.SMTPResponseException as exc:
        temporary = 400 <= exc.code < 500
        raise SendFailure(f"SMTP {exc.code}: {exc.message}"[:300], retryable=temporary, code=exc.code) from None
    except (aiosmtplib.SMTPTimeoutError, TimeoutError):
        raise SendFailure(f"timeout after {timeout_s}s", retryable=True, host_failure=True) from None
    except (aiosmtplib.SMTPException, OSError) as exc:  # disconnected, STARTTLS refused or failed, TLS errors
        message = f"SMTP failed: {type(exc).__name__}: {exc}"[:300]
        raise SendFailure(message, retryable=True, host_failure=True) from None
    finally:
        with contextlib.suppress(Exception):
            if client.is_connected:
                await client.quit()
        client.close()


CHANNEL = Channel(EMAIL.type, text, EMAIL, mail=build)

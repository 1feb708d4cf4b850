"""Sending deliveries (docs/webhooks.md#delivery-guarantees): HTTP with timeouts, retries with backoff (full jitter,
or the response's Retry-After), and per destination (scheme://host:port) a concurrency limit, a backlog limit
(beyond it deliveries wait in the outbox) and a circuit breaker, so a slow or dead endpoint never holds up another.
A failed attempt goes back to the outbox with its retry time: a crash or restart loses nothing."""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import random
import time
from dataclasses import dataclass

import aiohttp
from redis.exceptions import RedisError

from lagwatch.services.notifier import metrics
from lagwatch.services.notifier.channels import SendFailure
from lagwatch.services.notifier.channels import email as email_channel
from lagwatch.services.notifier.channels.email import Mail
from lagwatch.services.notifier.dlq import DeadLetters, dead_letter_record
from lagwatch.services.notifier.messages import PermanentError, Request, build_off_the_loop
from lagwatch.services.notifier.outbox import Delivery, Outbox
from lagwatch.services.notifier.subscriptions import Registry, Subscription
from lagwatch.shared.notifications.delivery import tls
from lagwatch.shared.notifications.delivery.address_guard import (
    ForbiddenAddress,
    GuardedResolver,
    destination,
    guarded_socket_factory,
)
from lagwatch.shared.runtime.backoff import doubling
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.config import NotifierConfig
from lagwatch.shared.runtime.outage_log import OutageLog
from lagwatch.shared.runtime.service_lifecycle import Backoff, pause

log = logging.getLogger(__name__)
MAX_RETRY_AFTER_S = 3600.0
CLAIM_BATCH = 200
LINGER_S = 0.002  # after a wake-up, gather a burst of new deliveries into one claim
REGISTRY_REFRESH_S = 0.5
ERROR_BODY_CHARS = 200


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 8
    base_s: float = 1.0
    cap_s: float = 300.0

    def backoff(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based): full jitter."""
        ceiling = doubling(self.base_s, self.cap_s, attempt - 1)
        return (rng or random).uniform(0, ceiling)


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Retry-After as seconds from now: delta-seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), MAX_RETRY_AFTER_S)
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):  # (None is no longer an answer: Python 3.10 raises instead)
        return None
    now = time.time() if now is None else now
    return min(max(0.0, moment.timestamp() - now), MAX_RETRY_AFTER_S)


@dataclass
class Result:
    ok: bool
    status: int | None = None
    error: str | None = None
    retryable: bool = False
    retry_after: float | None = None
    host_failure: bool = False  # counts against the destination's circuit breaker

    @property
    def reason(self) -> str:
        if self.ok:
            return "ok"
        if self.status is not None:
            return "429" if self.status == 429 else f"{self.status // 100}xx"
        return "timeout" if self.error and self.error.startswith("timeout") else "connection"


class CircuitBreaker:
    CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"

    def __init__(self, failures: int, cooldown_s: float) -> None:
        self.threshold = failures
        self.cooldown_s = cooldown_s
        self.state = self.CLOSED
        self.consecutive = 0
        self.opened_at = 0.0
        self.probing = False
        self.paused_until = 0.0  # a 429's Retry-After

    def allow(self, now: float) -> tuple[bool, float]:
        """(may send now, else when to try again)."""
        if now < self.paused_until:
            return False, self.paused_until
        if self.state == self.CLOSED:
            return True, now
        if self.state == self.OPEN:
            reopen = self.opened_at + self.cooldown_s
            if now < reopen:
                return False, reopen
            self.state = self.HALF_OPEN
            self.probing = False
        if self.probing:  # half-open: one probe at a time
            return False, now + min(self.cooldown_s, 1.0)
        self.probing = True
        return True, now

    def success(self) -> None:
        if self.state != self.CLOSED:
            metrics.OPEN_CIRCUITS.dec()
        self.state = self.CLOSED
        self.consecutive = 0
        self.probing = False

    def failure(self, now: float) -> None:
        self.consecutive += 1
        if self.state == self.HALF_OPEN or (self.state == self.CLOSED and self.consecutive >= self.threshold):
            if self.state == self.CLOSED:
                metrics.OPEN_CIRCUITS.inc()
                metrics.CIRCUIT_OPENED.inc()
            self.state = self.OPEN
            self.opened_at = now
            self.probing = False

    def release_probe(self) -> None:
        """The probe ended without a verdict (e.g. a 429)."""
        self.probing = False

    def pause(self, until: float) -> None:
        self.paused_until = max(self.paused_until, until)


@dataclass
class Destination:
    key: str
    semaphore: asyncio.Semaphore
    breaker: CircuitBreaker
    waiting: int = 0


class Sender:
    """The HTTP client: one aiohttp session, every address checked at connect time (address_guard), no redirect."""

    def __init__(self, *, timeout_s: float, allow_private: bool) -> None:
        self.timeout = aiohttp.ClientTimeout(total=timeout_s, connect=timeout_s)
        self.allow_private = allow_private
        self.session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(  # the address guard at connect time: names and IP literals alike
            resolver=GuardedResolver(allow_private=self.allow_private),
            socket_factory=guarded_socket_factory(allow_private=self.allow_private),
            limit=0,
            ttl_dns_cache=30,
        )
        self.session = aiohttp.ClientSession(connector=connector, timeout=self.timeout)

    async def stop(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None

    async def send(self, request: Request | Mail) -> Result:
        if isinstance(request, Mail):  # the email channel: SMTP, same retries, breaker and dead letters
            try:
                await email_channel.send(
                    request, timeout_s=self.timeout.total or 10.0, allow_private=self.allow_private
                )
            except SendFailure as exc:
                return Result(False, exc.code, str(exc), exc.retryable, host_failure=exc.host_failure)
            return Result(True)
        result = await self._send(request)
        if result.error and request.url in result.error:  # a URL may hold a secret (Slack's do): never repeat it
            result.error = result.error.replace(request.url, destination(request.url))
        return result

    async def _send(self, request: Request) -> Result:
        assert self.session is not None, "Sender.start() first"
        timeout = self.timeout  # a subscription's own `timeout` (Burrow's per-notifier one) replaces the notifier's
        if request.timeout_s:
            timeout = aiohttp.ClientTimeout(total=request.timeout_s, connect=request.timeout_s)
        try:
            ssl = tls.client_context(request.extra_ca, request.noverify)
        except tls.TlsProblem as exc:  # a CA file gone since start-up: fix it, then replay the dead letter
            return Result(False, error=str(exc))
        try:
            async with self.session.request(
                request.method,
                request.url,
                data=request.body,
                headers=request.headers,
                allow_redirects=False,
                timeout=timeout,
                ssl=ssl,
            ) as response:
                return classify(response.status, response.headers.get("Retry-After"), await _error_body(response))
        except TimeoutError:
            return Result(False, error=f"timeout after {timeout.total}s", retryable=True, host_failure=True)
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc.os_error, ForbiddenAddress):
                return Result(False, error=f"target refused: {exc.os_error}")
            return Result(False, error=f"connection failed: {exc}", retryable=True, host_failure=True)
        except ValueError as exc:  # aiohttp refuses the request itself (a bad header value, say): for good
            return Result(False, error=f"request refused: {type(exc).__name__}: {exc}")
        except (aiohttp.ClientError, OSError) as exc:
            return Result(
                False, error=f"connection failed: {type(exc).__name__}: {exc}", retryable=True, host_failure=True
            )


async def _error_body(response: aiohttp.ClientResponse) -> str:
    """The start of a refusal's body, for the error; a success's is never read: a receiver that accepted but is
    slow to send (or resets) its body has the notification, and must not get it again as a timeout's retry."""
    if 200 <= response.status < 300:
        return ""
    try:
        return (await response.content.read(ERROR_BODY_CHARS)).decode("utf-8", "replace")
    except (TimeoutError, aiohttp.ClientError, OSError):  # the status already says what happened
        return ""


def classify(status: int, retry_after: str | None, body: str = "") -> Result:
    if 200 <= status < 300:
        return Result(True, status)
    detail = f"HTTP {status}" + (f": {body.strip()[:ERROR_BODY_CHARS]}" if body.strip() else "")
    if status == 429 or status >= 500:  # a 429 is the host's answer, no failure of it
        return Result(False, status, detail, True, parse_retry_after(retry_after), host_failure=status != 429)
    if 300 <= status < 400:
        return Result(False, status, f"{detail} (redirects are not followed)")
    return Result(False, status, detail)


class Dispatcher:
    """Claims due deliveries from the outbox and sends each on its destination's queue."""

    def __init__(
        self,
        outbox: Outbox,
        registry: Registry,
        sender: Sender,
        dead_letters: DeadLetters,
        settings: NotifierConfig,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self.outbox = outbox
        self.registry = registry
        self.sender = sender
        self.settings = settings
        self.outcomes = Outcomes(outbox, dead_letters, settings, rng or random.Random())
        self.held: dict[str, Delivery] = {}
        self.destinations: dict[str, Destination] = {}
        self.wake = asyncio.Event()
        self.draining = False
        self._tasks: set[asyncio.Task] = set()
        self.max_held = max(CLAIM_BATCH, settings.per_host_queue * 4)
        self.identity_since: int | None = None  # receiver_identity.py: read from Redis before the first claim

    # --- the loop -----------------------------------------------------------------------------------------------

    async def run(self, stopping: asyncio.Event) -> None:
        renewer = asyncio.create_task(self._renew_leases(stopping))
        backoff, outage = Backoff(), OutageLog(log, "notifier: outbox unavailable")
        refreshed = 0.0
        try:
            while not stopping.is_set():
                try:
                    if self.identity_since is None:
                        self.identity_since = await self.outbox.identity_since()
                    if time.monotonic() - refreshed > REGISTRY_REFRESH_S:  # (unknown ids force a reload anyway)
                        await self.registry.refresh()
                        refreshed = time.monotonic()
                    await self._claim(stopping)
                    backoff.reset()
                    outage.ok()
                except Exception as exc:  # Redis down, mostly: keep going, nothing is lost
                    outage.failed(exc, f"retrying in {backoff.delay:.1f}s")
                    await backoff.pause(stopping)
        finally:
            await self._hand_back(renewer)

    async def _claim(self, stopping: asyncio.Event) -> None:
        """Claim what is due (as much as there is room for) and start sending it; wait when that was all."""
        claimed, next_due = await self.outbox.claim(min(CLAIM_BATCH, self.max_held - len(self.held)))
        for delivery in claimed:
            if delivery.id not in self.held:  # its lease lapsed while ours (Redis away, a clock jump): claimed
                self._start(delivery)  # back, and still being sent, by the task we have
        if len(claimed) < CLAIM_BATCH:
            await self._idle(stopping, next_due)

    async def _hand_back(self, renewer: asyncio.Task) -> None:
        """Let requests in flight finish (and settle) rather than send them again later; start no new ones; give
        the outbox back what is held."""
        self.draining = True
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=self.settings.request_timeout + 1)
        renewer.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, renewer, return_exceptions=True)
        with contextlib.suppress(Exception):
            released = await self.outbox.release(list(self.held))
            if released:
                log.info("notifier: handed back %d deliveries to the outbox", released)

    async def _idle(self, stopping: asyncio.Event, next_due: int | None) -> None:
        """Wait for new deliveries (`wake`), the next due one, or the poll interval (other instances' work)."""
        timeout = self.settings.poll_interval
        if next_due is not None:
            timeout = min(timeout, max(0.0, (next_due - now_ms()) / 1000))
        if timeout <= 0:
            await asyncio.sleep(LINGER_S)  # due but not claimed (held capacity full): let work proceed
            return
        if not self.wake.is_set():
            waiters = [asyncio.ensure_future(self.wake.wait()), asyncio.ensure_future(stopping.wait())]
            try:
                await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waiters:
                    w.cancel()
        if self.wake.is_set():
            await asyncio.sleep(LINGER_S)  # a burst of new deliveries: claim them together
            self.wake.clear()

    async def _renew_leases(self, stopping: asyncio.Event) -> None:
        period = max(0.05, self.settings.lease / 3)
        while not stopping.is_set():
            await pause(stopping, period)
            try:
                await self.outbox.renew(list(self.held))
            except Exception as exc:
                log.warning("notifier: cannot renew delivery leases (%s)", exc)

    def _start(self, delivery: Delivery) -> None:
        self.held[delivery.id] = delivery
        task = asyncio.create_task(self._run_one(delivery))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_one(self, delivery: Delivery) -> None:
        try:
            settled = await self._deliver(delivery)
        except Exception:  # Redis gone mid-way, say: stop renewing its lease, so it is claimed again when it ends
            log.exception("notifier: delivery %s failed unexpectedly; it stays in the outbox", delivery.id)
            settled = True
        if settled:  # (cancelled or skipped while stopping: still held, handed back to the outbox)
            self.held.pop(delivery.id, None)

    # --- one delivery -------------------------------------------------------------------------------------------

    def _destination(self, key: str) -> Destination:
        if key not in self.destinations:
            breaker = CircuitBreaker(self.settings.breaker_failures, self.settings.breaker_cooldown)
            self.destinations[key] = Destination(key, asyncio.Semaphore(self.settings.per_host_concurrency), breaker)
        return self.destinations[key]

    async def _deliver(self, delivery: Delivery) -> bool:
        """Send one delivery and settle it in the outbox; False when it was left alone because we are stopping."""
        subscription = await self.registry.find(delivery.subscription_id)
        if subscription is None:
            log.info(
                "notifier: delivery %s dropped: subscription %s no longer exists", delivery.id, delivery.subscription_id
            )
            await self.outbox.finish(delivery.id)
            metrics.DELIVERIES.labels("unknown", "dropped").inc()
            return True
        if "dead" in delivery.extra:  # failed for good earlier; only its dead letter is missing
            await self.outcomes.dead_letter(
                subscription, delivery, delivery.extra["dead"], delivery.extra.get("status")
            )
            return True
        dest = self._destination(subscription.destination)
        if dest.waiting >= self.settings.per_host_queue:
            await self.outcomes.defer(delivery, time.time() + min(1.0, self.settings.poll_interval), "host_busy")
            return True
        dest.waiting += 1
        entered = False
        try:
            async with dest.semaphore:
                entered = True
                dest.waiting -= 1
                if self.draining:
                    return False
                allowed, retry_at = dest.breaker.allow(time.time())
                if not allowed:
                    reason = "host_paused" if dest.breaker.paused_until > time.time() else "circuit_open"
                    await self.outcomes.defer(delivery, retry_at, reason)
                    return True
                try:
                    result = await self._attempt(subscription, delivery)
                except BaseException:
                    dest.breaker.release_probe()  # no verdict: a half-open host must not wait for good on this probe
                    raise
        finally:
            if not entered:
                dest.waiting -= 1
        await self.outcomes.settle(subscription, delivery, dest, result)
        return True

    async def _attempt(self, subscription: Subscription, delivery: Delivery) -> Result:
        delivery.attempts += 1
        options = {"dashboard_url": self.settings.dashboard_url, "allow_private": self.settings.allow_private_targets}
        try:
            request = await build_off_the_loop(
                subscription, delivery, **options, identity_since=self.identity_since or 0
            )
        except PermanentError as exc:
            return Result(False, error=str(exc))
        except Exception as exc:  # an event this version cannot render: retrying will not help
            log.exception("notifier: cannot build the request of delivery %s", delivery.id)
            return Result(False, error=f"cannot build the request: {type(exc).__name__}: {exc}")
        sent_at = time.time()
        if delivery.first_sent_at is None:
            delivery.first_sent_at = int(sent_at * 1000)
            evaluated_at = delivery.event.evaluated_at
            fresh = not delivery.kind.endswith("repeat") and not delivery.extra and not delivery.reason
            if fresh and evaluated_at:  # (a repeat, replay or scope close carries an older event)
                metrics.DELIVERY_LATENCY.labels(subscription.type).observe(max(0.0, sent_at - evaluated_at / 1000))
        result = await self.sender.send(request)
        metrics.REQUEST_SECONDS.labels(subscription.type).observe(time.time() - sent_at)
        metrics.ATTEMPTS.labels(subscription.type, result.reason).inc()
        return result


class Outcomes:
    """What becomes of a delivery after an attempt: out of the outbox once sent, back in it with its retry time,
    or dead-lettered (kept in the outbox, marked, while the dead-letter topic cannot take it)."""

    def __init__(self, outbox: Outbox, dead_letters: DeadLetters, settings: NotifierConfig, rng: random.Random):
        self.outbox, self.dead_letters, self.rng = outbox, dead_letters, rng
        self.retry = RetryPolicy(settings.max_attempts, settings.backoff_base, settings.backoff_cap)

    async def settle(self, subscription: Subscription, delivery: Delivery, dest: Destination, result: Result) -> None:
        now = time.time()
        breaker = dest.breaker
        if result.ok:
            breaker.success()
            await self._finish_sent(delivery)
            metrics.DELIVERIES.labels(subscription.type, "delivered").inc()
            log.debug("notifier: %s delivered to %s (%s)", delivery.id, subscription.id, dest.key)
            return
        if result.host_failure:
            breaker.failure(now)
        elif result.status is not None and result.status != 429:
            breaker.success()  # the host answered: it is up
        else:
            breaker.release_probe()
        delivery.last_error = result.error
        if not result.retryable or delivery.attempts >= self.retry.max_attempts:
            why = (
                result.error if not result.retryable else f"gave up after {delivery.attempts} attempts: {result.error}"
            )
            await self.dead_letter(subscription, delivery, why or "failed", result.status)
            return
        wait = result.retry_after if result.retry_after is not None else self.retry.backoff(delivery.attempts, self.rng)
        if result.status == 429:
            breaker.pause(now + wait)
        metrics.RETRIES.labels(subscription.type, result.reason).inc()
        log.info(
            "notifier: delivery %s to subscription %s (%s) failed (%s); attempt %d of %d, next in %.2fs",
            delivery.id,
            subscription.id,
            dest.key,
            result.error,
            delivery.attempts,
            self.retry.max_attempts,
            wait,
        )
        await self.outbox.reschedule(delivery, int((now + wait) * 1000))

    async def _finish_sent(self, delivery: Delivery) -> None:
        """Take a sent delivery out of the outbox, retrying while Redis is away: it stays held meanwhile (its lease
        renewed once Redis is back). Given up, it would be claimed and sent a second time when Redis returned."""
        backoff = Backoff(0.1, 2.0)
        while True:
            try:
                await self.outbox.finish(delivery.id)
                return
            except (RedisError, OSError) as exc:
                log.warning(
                    "notifier: %s was sent, recording it failed (%s); retrying in %.1fs",
                    delivery.id,
                    exc,
                    backoff.delay,
                )
                await backoff.pause()  # through a stop too, until its cancel: the stop waits for sends to settle

    async def defer(self, delivery: Delivery, at: float, reason: str) -> None:
        metrics.DEFERRED.labels(reason).inc()
        await self.outbox.reschedule(delivery, int(at * 1000))

    async def dead_letter(self, subscription: Subscription, delivery: Delivery, error: str, status: int | None) -> None:
        record = dead_letter_record(delivery, error, status)
        try:
            await self.dead_letters.publish(record)
        except Exception as exc:  # Kafka unavailable: keep it in the outbox, marked, and try the dead letter again
            log.warning("notifier: dead letter for %s not published (%s); kept in the outbox", delivery.id, exc)
            delivery.extra = {**delivery.extra, "dead": error, "status": status}
            await self.outbox.reschedule(delivery, int((time.time() + self.retry.backoff(1, self.rng) + 1) * 1000))
            return
        await self.outbox.finish(delivery.id)
        metrics.DEAD_LETTERS.labels(subscription.type).inc()
        metrics.DELIVERIES.labels(subscription.type, "dead_lettered").inc()
        log.warning(
            "notifier: delivery %s to subscription %s dead-lettered after %d attempts: %s",
            delivery.id,
            subscription.id,
            delivery.attempts,
            error,
        )

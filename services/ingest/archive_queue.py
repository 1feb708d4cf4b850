"""The batches between the worker's store and its commit: stored in Redis, their commits on the way to the history
topic (`history.enabled`).

Only the offsets-topic position waits for the history topic: a batch's positions are committed once it and every
batch before it are stored and archived (an unacknowledged commit is never passed: it is read again).

While the history topic does not take them (a delivery failed, or the oldest is unacknowledged for `stall_s`), the
queue stops archiving and committing, and the windows, change notices and judging clock go on: waiting as for Redis
would let one history partition's outage stop the whole cluster's. A probe sends the oldest unarchived batch again,
with backoff; once acknowledged, the worker rewinds (`rewind_due`) and reads again from the committed positions
(duplicates to the windows, which `order` drops; `BatchProcessor.read_again`). Admin mode cannot read again: the
history misses the outage's commits (logged).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiokafka.errors import KafkaError
from confluent_kafka import KafkaException

from lagwatch.services.ingest import metrics
from lagwatch.shared.records.history import HistoryMessages
from lagwatch.shared.runtime.service_lifecycle import Backoff

log = logging.getLogger(__name__)
LIMIT = 8  # batches sent and not yet acknowledged; past it the reader waits (bounded memory: ~1 MB of text each)
STALL_S = 5.0  # the oldest delivery unacknowledged this long: the history topic is not taking them
PROBE_BACKOFF_S = (0.5, 5.0)  # first and longest pause between two probes

Publish = Callable[[HistoryMessages], Awaitable[int]]


@dataclass(slots=True, eq=False)
class Ticket:
    """One batch: its delivery to the history topic (None: nothing to send) and, once stored, its positions."""

    delivery: asyncio.Task[int] | None
    messages: HistoryMessages | None
    started: float = field(default_factory=time.monotonic)
    positions: dict[int, int] | None = None  # set when stored

    def archived(self) -> bool:
        d = self.delivery
        return d is None or (d.done() and not d.cancelled() and d.exception() is None)

    def failed(self) -> bool:
        d = self.delivery
        return d is not None and d.done() and (d.cancelled() or d.exception() is not None)


class ArchiveQueue:
    def __init__(
        self,
        cluster: str,
        publish: Publish | None,
        commit: Callable[[dict[int, int]], None],
        *,
        can_rewind: bool = True,
        limit: int = LIMIT,
        stall_s: float = STALL_S,
    ) -> None:
        self.cluster = cluster
        self.can_rewind = can_rewind  # False in admin mode: nothing can be read again
        self.limit, self.stall_s = limit, stall_s
        self.broken = False  # the history topic is not taking the commits: nothing is committed
        self.rewind_due = False  # it takes them again: read from the committed positions (topic mode)
        self._publish = publish
        self._commit = commit
        self._tickets: deque[Ticket] = deque()  # in batch order, up to the first not yet committable
        self._probe: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        if publish is not None:
            metrics.HISTORY_BROKEN.labels(cluster).set(0)

    def send(self, messages: HistoryMessages) -> Ticket:
        """Start archiving a batch's commits (right after it is applied); `stored` follows once it is in Redis."""
        delivery = None
        if self._publish is not None and messages and not self.broken:
            delivery = asyncio.ensure_future(self._publish(messages))
            delivery.add_done_callback(self._delivered)
        ticket = Ticket(delivery, messages if delivery is not None else None)
        if not self.broken:
            self._tickets.append(ticket)
        return ticket

    def stored(self, ticket: Ticket, positions: dict[int, int]) -> None:
        """The batch is in Redis: its positions are committed once it and those before it are archived."""
        ticket.positions = positions
        self._settle()

    async def room(self) -> None:
        """Wait while `limit` batches are on their way (a slow history topic holds the reader), at most until the
        oldest has waited `stall_s`: then the history topic counts as not taking them."""
        while not self.broken and len(sending := self._sending()) >= self.limit:
            oldest = sending[0]
            left = self.stall_s - (time.monotonic() - oldest.started)
            if left <= 0:
                self._stalled(oldest)
                return
            assert oldest.delivery is not None
            await asyncio.wait({oldest.delivery}, timeout=left)
            self._settle()

    def watch(self) -> None:
        """Between batches: notice a history topic that stopped acknowledging (its deliveries hang, not fail)."""
        sending = self._sending()
        if sending and time.monotonic() - sending[0].started > self.stall_s:
            self._stalled(sending[0])

    async def hand_over(self) -> None:
        """Before the positions are committed for good (a revocation, a stop): wait for the deliveries on their way
        (at most `stall_s`) and commit what is archived. One still unacknowledged breaks the queue: nothing past it
        is committed, and its records are read again from the committed positions."""
        waiting = {t.delivery for t in self._sending() if t.delivery is not None}
        if waiting and not self.broken:
            await asyncio.wait(waiting, timeout=self.stall_s)
        self._settle()
        if sending := self._sending():
            self._stalled(sending[0])

    def rewound(self) -> None:
        """The worker reads from the committed positions again: archiving goes on."""
        self.rewind_due = False
        self._recovered()

    async def stop(self) -> None:
        self._stopping.set()
        if self._probe is not None:
            self._probe.cancel()
            await asyncio.wait({self._probe}, timeout=1.0)

    def _sending(self) -> list[Ticket]:
        """The batches whose delivery is on its way, oldest first."""
        return [t for t in self._tickets if t.delivery is not None and not t.delivery.done()]

    def _delivered(self, delivery: asyncio.Task[int]) -> None:
        if not delivery.cancelled():
            delivery.exception()  # looked at here: one the queue no longer holds is not reported as never retrieved
        self._settle()

    def _settle(self) -> None:
        """Commit the positions of the batches archived and stored, in order; a failed delivery breaks the queue."""
        tickets = self._tickets
        while tickets and not self.broken:
            front = tickets[0]
            if front.failed():
                self._break(front, _failure(front))
                return
            if front.positions is None or not front.archived():
                return
            tickets.popleft()
            if front.positions:
                self._commit(front.positions)

    def _stalled(self, ticket: Ticket) -> None:
        self._break(ticket, f"not acknowledged within {self.stall_s:.0f}s")

    def _break(self, ticket: Ticket, reason: str) -> None:
        """Stop archiving and committing; probe with the oldest unarchived batch until it is acknowledged."""
        self.broken = True
        self._tickets.clear()  # never committed: read again after the rewind
        metrics.HISTORY_BROKEN.labels(self.cluster).set(1)
        log.warning(
            "ingest %s: the history topic is not taking commits (%s); the windows go on, the offsets-topic position "
            "waits%s",
            self.cluster,
            reason,
            " until it does and the commits since are read again" if self.can_rewind else "; the history has a gap",
        )
        if ticket.messages is not None and self._probe is None:
            self._probe = asyncio.ensure_future(self._probe_until_archived(ticket.messages))

    async def _probe_until_archived(self, messages: HistoryMessages) -> None:
        assert self._publish is not None
        backoff = Backoff(*PROBE_BACKOFF_S)
        while True:
            await backoff.pause(self._stopping)
            if self._stopping.is_set():  # checked here too: Python 3.11's wait_for can swallow the stop's cancel
                return
            try:
                await self._publish(messages)
                break
            except (KafkaException, KafkaError, OSError, BufferError) as exc:  # BufferError: librdkafka's queue full
                log.debug("ingest %s: the history topic still refuses (%s)", self.cluster, exc)
            except Exception:  # the unexpected must not end the probe: archiving would never resume
                log.exception("ingest %s: probing the history topic failed; trying again", self.cluster)
        self._probe = None
        if self.can_rewind:
            log.warning("ingest %s: the history topic takes commits again; reading them again", self.cluster)
            metrics.HISTORY_REWINDS.labels(self.cluster).inc()
            self.rewind_due = True
        else:
            log.warning("ingest %s: the history topic takes commits again (those in between are missing)", self.cluster)
            self._recovered()

    def _recovered(self) -> None:
        self.broken = False
        self._tickets.clear()
        if self._publish is not None:
            metrics.HISTORY_BROKEN.labels(self.cluster).set(0)


def _failure(ticket: Ticket) -> str:
    assert ticket.delivery is not None
    if ticket.delivery.cancelled():
        return "its delivery was cancelled"
    return str(ticket.delivery.exception())

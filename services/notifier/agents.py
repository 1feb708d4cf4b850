"""The agents' side: a topic's records taken a batch at a time (read_ahead.py: whatever has arrived, so an event
alone is not kept waiting), read into events (events.py; a record that is not one is skipped and counted), recorded
(event_batches.py) — retried while Redis is away, until it is all done or the service stops — and only then
acknowledged (manual acks: an event whose handling did not finish is not committed and is read again)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from redis.exceptions import RedisError

from lagwatch.services.notifier import event_batches, metrics, read_ahead
from lagwatch.services.notifier.event_batches import EventBatch, EventRecorder
from lagwatch.services.notifier.events import AnyKind
from lagwatch.services.notifier.skipped_events import ReadPositions
from lagwatch.shared.runtime.outage_log import OutageLog
from lagwatch.shared.runtime.service_lifecycle import Backoff

log = logging.getLogger(__name__)


class EventIntake:
    def __init__(
        self,
        recorder: EventRecorder,
        positions: ReadPositions,
        stopping: asyncio.Event,
        forgotten: Callable[[], Mapping[str, int]],  # cluster -> when it was forgotten (scope_watch.py)
    ) -> None:
        self.recorder, self.positions, self.stopping, self.forgotten = recorder, positions, stopping, forgotten
        self.events_handled = 0
        # one for all events: they fail together while Redis is away (and none is made per event)
        self._outage = OutageLog(log, "notifier: cannot record events")

    async def consume(self, stream: Any, kind: AnyKind) -> None:
        batches = read_ahead.batches(stream.noack().events(), event_batches.MOST, event_batches.LINGER_S)
        async with contextlib.aclosing(batches):
            async for events in batches:
                if not await self.handle_batch([event.value for event in events], kind):
                    return  # stopping: the events stay unacknowledged, so they are read again after a restart
                for event in events:
                    await stream.ack(event)
                    self.positions.moved_to(event.message.topic, event.message.partition, event.message.offset + 1)

    async def handle_batch(self, raws: list[bytes | None], kind: AnyKind) -> bool:
        """Record the events, retried while Redis is away: True once all are (acknowledge them), False if stopping."""
        events = []
        for raw in raws:
            event = kind.parse(raw)
            if event is None:
                log.warning("notifier: skipped a record that is not a %s event", kind.name)
                metrics.EVENTS.labels("malformed").inc()
            else:
                events.append(event)
        if not events:
            return True
        batch, backoff = EventBatch(events, kind), Backoff()
        while not self.stopping.is_set():
            try:
                await self.recorder.record(batch, self.forgotten())
                self._outage.ok()
            except (RedisError, OSError) as exc:
                self._outage.failed(f"{batch.describe()}: {exc}", f"retrying in {backoff.delay:.1f}s")
                await backoff.pause(self.stopping)
                continue
            self.events_handled += batch.count()
            return True
        return False

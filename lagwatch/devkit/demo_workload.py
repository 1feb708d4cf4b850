"""The demo workload: real producers and real consumer groups playing the scenarios of `demo_scenarios`.

Each scenario gets a real aiokafka consumer in its own group (subscribed to its topic, committing through the
group coordinator) and shares one producer. The Kafka mock keeps commits to itself and writes nothing to
`__consumer_offsets`, so after each commit the workload writes the coordinator's record there, as a broker would
(`OffsetsTopicWriter`): a group-metadata record when the consumer joins or leaves, an offset commit per commit.

Topics must exist before the workload starts (a producer asking for an unknown topic makes the mock auto-create it
with 4 partitions): `demo_topics()` lists them for whoever starts Kafka.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import uuid
from collections.abc import Callable, Iterable, Sequence

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from lagwatch.devkit.demo_scenarios import Phase, Scenario
from lagwatch.devkit.offsets_topic_writer import OffsetsTopicWriter, member
from lagwatch.shared.records.offsets_codec import GroupMember

DEFAULT_TICK_S = 1.0
DEFAULT_MAX_POLL_INTERVAL_MS = 300_000  # Kafka's (and aiokafka's) default
CLIENT_HOST = "/127.0.0.1"
Announce = Callable[[Scenario, Phase], None]


def demo_topics(scenarios: Iterable[Scenario]) -> dict[str, int]:
    """Topic -> partitions, to be created before the workload runs."""
    return {s.topic: 1 for s in scenarios}


class ScenarioConsumer:
    """One scenario's consumer: a real group member on a one-partition topic, committing explicit offsets, that plays
    the scenario's phases tick by tick (`play`) until its last (endless) phase is cancelled."""

    def __init__(
        self,
        scenario: Scenario,
        bootstrap: str,
        writer: OffsetsTopicWriter,
        producer: AIOKafkaProducer,
        max_poll_interval_ms: int,
        tick_s: float,
        announce: Announce | None,
    ) -> None:
        self.scenario = scenario
        self.writer = writer
        self.producer = producer
        self.tick_s = tick_s
        self.announce = announce
        self.log_end = 0
        self.tp = TopicPartition(scenario.topic, 0)
        self.member_id = f"{scenario.group}-1-{uuid.uuid4()}"
        self.generation = 0
        self.running = False
        self._consumer = AIOKafkaConsumer(
            scenario.topic,
            bootstrap_servers=bootstrap,
            group_id=scenario.group,
            client_id=f"{scenario.group}-1",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,  # the mock answers a fetch only when its wait is over
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            max_poll_interval_ms=max_poll_interval_ms,
        )

    async def start(self, timeout: float = 60.0) -> None:
        await self._consumer.start()
        self.running = True
        async with asyncio.timeout(timeout):
            while self.tp not in self._consumer.assignment():
                await asyncio.sleep(0.05)
        client_id = f"{self.scenario.group}-1"
        await self._write_membership([member(self.member_id, client_id, CLIENT_HOST, {self.tp.topic: [0]})])

    async def stop(self) -> None:
        """Leave the group (the coordinator records it as empty)."""
        if not self.running:
            return
        self.running = False
        await self._consumer.stop()
        with contextlib.suppress(Exception):  # stopping the demo: Kafka may already be gone
            await self._write_membership([])

    async def position(self) -> int:
        return await self._consumer.position(self.tp)

    async def consume_to(self, target: int, deadline: float) -> bool:
        """Read until the position reaches `target` or the loop clock passes `deadline`; True if it moved.

        With nothing to read it still polls, reading nothing: a member that does not poll within
        `max.poll.interval.ms` leaves its group (Kafka's liveness rule), and a stuck consumer is one that polls
        without making progress, not one that is gone."""
        start = await self.position()
        position = start
        if position >= target:
            await self._poll_without_reading()
            return False
        loop = asyncio.get_running_loop()
        while position < target and loop.time() < deadline:
            await self._consumer.getmany(self.tp, timeout_ms=100, max_records=target - position)
            position = await self.position()
        return position != start

    async def _poll_without_reading(self) -> None:
        self._consumer.pause(self.tp)  # records already fetched stay unread: the position does not move
        try:
            await self._consumer.getmany(self.tp, timeout_ms=0)
        finally:
            self._consumer.resume(self.tp)

    async def seek_back(self, messages: int) -> None:
        self._consumer.seek(self.tp, max(0, await self.position() - messages))

    async def commit(self) -> int:
        """Commit the position to the group coordinator, then write the record the coordinator would."""
        offset = await self.position()
        await self._consumer.commit({self.tp: offset})
        await self.writer.commit(self.scenario.group, self.tp.topic, 0, offset)
        return offset

    async def _write_membership(self, members: Sequence[GroupMember]) -> None:
        self.generation += 1
        await self.writer.group_metadata(self.scenario.group, generation=self.generation, members=members)

    async def play(self) -> None:
        for phase in self.scenario.phases:
            if self.announce:
                self.announce(self.scenario, phase)
            if phase.rewind:
                await self.seek_back(phase.rewind)
            if not phase.consumer_running:
                await self.stop()
            ticks = itertools.count() if phase.ticks is None else range(phase.ticks)
            for _ in ticks:
                await self._tick(phase)

    async def _tick(self, phase: Phase) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await self._produce(phase.produce, phase.message_bytes)
        if phase.consumer_running:
            # Half a tick between producing and committing: the poller sees the new log end before the commit, so
            # the lag stored with the commit is the real one.
            await asyncio.sleep(max(0.0, start + self.tick_s / 2 - loop.time()))
            position = await self.position()
            consume = phase.consume  # ALL (None): up to the log end
            target = self.log_end if consume is None else min(self.log_end, position + consume)
            moved = await self.consume_to(target, deadline=start + self.tick_s * 0.9)
            if moved or phase.commit_unchanged:
                await self.commit()
        await asyncio.sleep(max(0.0, start + self.tick_s - loop.time()))

    async def _produce(self, n: int, size: int = 0) -> None:
        if n == 0:
            return
        topic = self.scenario.topic
        messages = (b"%s message %d" % (topic.encode(), i) for i in range(n))
        sent = [await self.producer.send(topic, m.ljust(size, b"."), partition=0) for m in messages]
        metadata = await asyncio.gather(*sent)
        self.log_end = max(m.offset for m in metadata) + 1


async def run_workload(
    bootstrap: str,
    scenarios: Sequence[Scenario],
    *,
    tick_s: float = DEFAULT_TICK_S,
    announce: Announce | None = None,
    on_ready: Callable[[], None] | None = None,
    max_poll_interval_ms: int = DEFAULT_MAX_POLL_INTERVAL_MS,
) -> None:
    """Start every scenario's consumer, then play them all at once until cancelled."""
    async with (
        OffsetsTopicWriter(bootstrap) as writer,
        AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=2) as producer,
    ):
        consumers = [
            ScenarioConsumer(s, bootstrap, writer, producer, max_poll_interval_ms, tick_s, announce) for s in scenarios
        ]
        try:
            async with asyncio.TaskGroup() as starting:
                for consumer in consumers:
                    starting.create_task(consumer.start())
            if on_ready:
                on_ready()
            async with asyncio.TaskGroup() as playing:  # one failing scenario stops the others
                for consumer in consumers:
                    playing.create_task(consumer.play())
        finally:
            for consumer in consumers:
                with contextlib.suppress(Exception):
                    await consumer.stop()

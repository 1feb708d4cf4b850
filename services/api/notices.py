"""Change notices for groups the api deletes, so the evaluator re-evaluates them (to NOTFOUND) at once.

One producer per configured cluster, started in the background: the api answers reads while Kafka is down, and a
DELETE waits only briefly for a producer still starting. Best effort: a lost notice delays the NOTFOUND by a sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from lagwatch.shared.runtime.config import Config
from lagwatch.shared.runtime.kafka_client import librdkafka_config
from lagwatch.shared.windows.changes import ChangePublisher

log = logging.getLogger(__name__)
START_WAIT_S = 5.0  # how long a DELETE waits for a producer still connecting


class DeletionNotices:
    def __init__(self, config: Config) -> None:
        self.config = config
        self._publishers: dict[str, ChangePublisher] = {}
        self._starting: dict[str, asyncio.Task[None]] = {}

    def start(self) -> None:
        topic = self.config.evaluator.changes_topic
        for name, cluster in self.config.clusters.items():
            publisher = ChangePublisher(librdkafka_config(cluster, name), topic)
            self._publishers[name] = publisher
            self._starting[name] = asyncio.create_task(publisher.start(), name=f"api-notices-{name}")

    async def deleted(self, cluster: str, group: str) -> None:
        publisher = self._publishers.get(cluster)
        if publisher is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._starting[cluster]), START_WAIT_S)
        except TimeoutError:
            log.warning("api: no change notice for deleted %s/%s: Kafka producer still starting", cluster, group)
            return
        except Exception as exc:  # the producer could not start; the sweep will notice the deletion
            log.warning("api: no change notice for deleted %s/%s: %s", cluster, group, exc)
            return
        await publisher.publish(cluster, [(group, "deleted")])

    async def stop(self) -> None:
        for name, task in self._starting.items():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            await self._publishers[name].stop()

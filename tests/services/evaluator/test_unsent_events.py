"""The age of the oldest event an evaluator retries (services/evaluator/unsent_events.py): from the first try, gone
once sent, forgotten when the evaluator stops looking at its group, and carried across a restart through Redis."""

import asyncio

from prometheus_client import REGISTRY

from lagwatch.services.evaluator import unsent_events
from lagwatch.services.evaluator.unsent_events import LAG, STATUS, UnsentEvents
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.clock import now_ms


def unsent_seconds(cluster: str) -> float | None:
    """The gauge as a scrape reads it."""
    return REGISTRY.get_sample_value("lagwatch_evaluator_unsent_events_seconds", {"cluster": cluster})


async def test_the_oldest_wait_counts_from_the_first_try_and_ends_when_sent(redis):
    waiting = UnsentEvents(redis, "c-sent")
    assert unsent_seconds("c-sent") == 0.0
    await waiting.published(STATUS, ["a"], [])
    await asyncio.sleep(0.2)
    await waiting.published(STATUS, ["a", "b"], [])  # a retried, b new: a's first try counts
    assert 0.2 <= unsent_seconds("c-sent") < 5
    await waiting.published(STATUS, ["b"], ["a"])
    assert unsent_seconds("c-sent") < 0.2  # b only, found unsent a moment ago
    await waiting.published(STATUS, [], ["b"])
    assert unsent_seconds("c-sent") == 0.0
    assert await redis.hgetall(keys.unsent_events("c-sent")) == {}  # nothing left behind once all went out


async def test_a_group_no_longer_retried_here_no_longer_counts(redis, monkeypatch):
    monkeypatch.setattr(unsent_events, "FORGOTTEN_S", 0.5)
    waiting = UnsentEvents(redis, "c-moved")
    await waiting.published(STATUS, ["moved-away"], [])
    await asyncio.sleep(0.1)
    assert unsent_seconds("c-moved") >= 0.1
    await asyncio.sleep(0.6)  # not retried here since: its group went to another evaluator, which retries it there
    assert unsent_seconds("c-moved") == 0.0


async def test_an_evaluator_started_again_counts_on_from_the_first_try(redis):
    """Kafka trouble that restarts evaluators (a crash loop, a liveness probe) must still reach the alert's minute."""
    first = UnsentEvents(redis, "c-restart")
    await first.published(STATUS, ["billing"], [])
    await first.published(LAG, ["orders"], [])
    await asyncio.sleep(0.3)
    restarted = UnsentEvents(redis, "c-restart")  # a new process: nothing in memory
    await restarted.published(STATUS, ["billing"], [])
    assert unsent_seconds("c-restart") >= 0.3
    await restarted.published(STATUS, [], ["billing"])
    assert unsent_seconds("c-restart") == 0.0  # the lag outbox of orders waits, but not retried by this one
    assert list(await redis.hgetall(keys.unsent_events("c-restart"))) == [b"lag\norders"]


async def test_a_record_nobody_retried_lately_or_unreadable_starts_over(redis):
    key = keys.unsent_events("c-stale")
    an_hour_ago = now_ms() - 3_600_000
    await redis.hset(key, mapping={"status\nold": f"{an_hour_ago} {an_hour_ago}", "status\nbad": "not a time"})
    waiting = UnsentEvents(redis, "c-stale")
    await waiting.published(STATUS, ["old", "bad"], [])  # left by an instance whose events then went out elsewhere
    assert unsent_seconds("c-stale") < 1
    since = int((await redis.hget(key, "status\nold")).split()[0])
    assert since > an_hour_ago

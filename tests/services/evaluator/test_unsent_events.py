"""The age of the oldest status event an evaluator retries: from its first try, gone once sent, and forgotten when
the evaluator stops looking at its group (another instance took it over)."""

import time

from prometheus_client import REGISTRY

from lagwatch.services.evaluator import unsent_events
from lagwatch.services.evaluator.unsent_events import UnsentEvents


def unsent_seconds(cluster: str) -> float | None:
    """The gauge as a scrape reads it."""
    return REGISTRY.get_sample_value("lagwatch_evaluator_unsent_events_seconds", {"cluster": cluster})


def test_the_oldest_wait_counts_from_the_first_try_and_ends_when_sent():
    waiting = UnsentEvents("c-sent")
    assert unsent_seconds("c-sent") == 0.0
    waiting.published(["a"], [])
    time.sleep(0.2)
    waiting.published(["a", "b"], [])  # a retried, b new: a's first try counts
    assert 0.2 <= unsent_seconds("c-sent") < 5
    waiting.published(["b"], ["a"])
    assert unsent_seconds("c-sent") < 0.2  # b only, found unsent a moment ago
    waiting.published([], ["b"])
    assert unsent_seconds("c-sent") == 0.0


def test_a_group_no_longer_retried_here_no_longer_counts(monkeypatch):
    monkeypatch.setattr(unsent_events, "FORGOTTEN_S", 0.5)
    waiting = UnsentEvents("c-moved")
    waiting.published(["moved-away"], [])
    time.sleep(0.1)
    assert unsent_seconds("c-moved") >= 0.1
    time.sleep(0.6)  # not retried here since: its group went to another evaluator, which retries it there
    assert unsent_seconds("c-moved") == 0.0

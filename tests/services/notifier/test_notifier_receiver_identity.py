"""services/notifier/receiver_identity.py: what Alertmanager and PagerDuty know an incident by — the incident and the
subscription, so that two subscriptions sending to one receiver keep two alerts; incidents begun before the first
notifier naming them so keep the name they were opened under."""

from lagwatch.services.notifier.outbox import Outbox
from lagwatch.services.notifier.receiver_identity import ROLLOUT_MS, ReceiverIdentity, receiver_identity
from tests.services.notifier.test_notifier_support import typed

EVENT = typed({"cluster": "prod", "group": "billing", "incident_id": "inc-1", "incident_started_at": 5_000})


def test_an_incident_is_named_per_subscription():
    assert receiver_identity(EVENT, "team-a", since_ms=1_000) == ReceiverIdentity("inc-1/team-a", "team-a")
    assert receiver_identity(EVENT, "team-b", since_ms=1_000).key == "inc-1/team-b"


def test_an_incident_begun_before_keeps_the_shared_name_until_it_closes():
    # opened by an earlier version under the incident's id: its updates and close must use that name too
    assert receiver_identity(EVENT, "team-a", since_ms=9_000) == ReceiverIdentity("inc-1", None)


def test_an_event_without_an_incident_is_named_by_its_group():
    event = typed({"cluster": "prod", "group": "billing", "evaluated_at": 5_000})
    assert receiver_identity(event, "a", since_ms=0).key == "prod/billing/a"
    assert receiver_identity(event, "a", since_ms=6_000).key == "prod/billing"


async def test_the_first_notifier_sets_since_when_and_the_others_read_it(redis):
    first, later = (Outbox(redis, lease_ms=1000, seen_ttl_ms=1000) for _ in range(2))
    # incidents begun while a rolling upgrade may still run the previous version keep the shared name as well
    assert await first.identity_since(now=1_000) == 1_000 + ROLLOUT_MS
    assert await later.identity_since(now=2_000) == 1_000 + ROLLOUT_MS  # a restart or another instance: the same

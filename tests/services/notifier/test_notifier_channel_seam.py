"""The seam between the notifier and its channels (services/notifier/channels/): every destination type is one channel
behind `Channel`, each rendering a typed `Notification`; the event is a JSON document only in a body, a template's
context, and the outbox's stored delivery."""

import json

from lagwatch.services.notifier import channels
from lagwatch.services.notifier.channels import Notification
from lagwatch.services.notifier.outbox import Delivery
from lagwatch.shared.notifications.subscriptions.destinations import destination
from lagwatch.shared.runtime.config import SUBSCRIPTION_TYPES, SubscriptionConfig
from tests.services.notifier.test_notifier_support import Timeline


def opened():
    t = Timeline("billing", start_ms=1_700_000_000_000)
    t.next("OK")
    return t.next("ERR", (500, 0))


def test_every_subscription_type_is_one_channel_named_by_its_type():
    for type_ in SUBSCRIPTION_TYPES:
        channel = channels.channel(type_)
        assert channel.type == type_ and channel.destination is destination(type_)
        assert (channel.mail is not None) == (type_ == "email")


def test_a_channel_renders_the_typed_event_and_a_template_sees_it_as_on_its_topic():
    event = opened()
    note = Notification(event, "open", SubscriptionConfig(id="s"), now_ms=event.evaluated_at + 60_000)
    assert channels.channel("webhook").body(note) == event.encode()
    assert note.context()["event"] == event.as_dict() == json.loads(event.encode())
    assert note.duration_s == note.context()["incident"]["duration_s"] == 60.0
    assert json.loads(channels.channel("slack").body(note))["text"] == ":red_circle: ERR: billing on local"


def test_a_delivery_keeps_the_event_typed_and_stores_it_as_on_its_topic():
    event = opened()
    delivery = Delivery("d", "s", "open", event, event.event_id, 1, reason="test")
    stored = json.loads(delivery.to_json())
    assert stored["event"] == event.as_dict() and stored["reason"] == "test" and "extra" not in stored
    assert Delivery.from_json(delivery.to_json()) == delivery

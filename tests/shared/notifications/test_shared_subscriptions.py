"""shared/subscriptions: the contract the api and the notifier share — masking covers every destination type's
credentials, and a stored document reads back as the subscription it was."""

import json

from lagwatch.services.notifier import channels
from lagwatch.shared.notifications.subscriptions.destinations import DESTINATIONS
from lagwatch.shared.notifications.subscriptions.documents import kebab, to_document
from lagwatch.shared.notifications.subscriptions.masking import MASK, masked_document
from lagwatch.shared.runtime.config import SubscriptionConfig, build_section


def test_every_credential_a_destination_type_declares_is_masked_whatever_the_type():
    secrets = {name for d in DESTINATIONS.values() for name in d.secrets}
    config = SubscriptionConfig(id="s", type="webhook", **dict.fromkeys(secrets, "a-long-credential-value"))
    shown = masked_document(config, "api")
    assert secrets and all(shown[name] == MASK + "alue" for name in secrets)


def test_every_destination_type_with_its_own_options_has_a_notifier_channel():
    assert {t: channels.channel(t).destination for t in DESTINATIONS} == DESTINATIONS


def test_a_pagerduty_routing_key_and_an_email_password_are_masked_in_the_api_view():
    config = SubscriptionConfig(id="s", type="pagerduty", routing_key="R0UTINGKEY1234", password="hunter2-hunter2")
    shown = masked_document(config, "api")
    assert shown["routing_key"] == MASK + "1234"
    assert shown["password"] == MASK + "ter2"


def test_a_stored_document_reads_back_as_the_same_subscription():
    config = SubscriptionConfig(id="s", type="email", smtp_host="mail.example", from_="a@example.com", to=["b@x.io"])
    text = json.dumps(to_document(config))
    assert build_section(SubscriptionConfig, kebab(json.loads(text))) == config

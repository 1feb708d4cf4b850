"""The sample incident of `lagwatch notify test` (services/notifier/sample.py) through the channels the CLI tests do
not reach: an e-mail subscription gets both mails over STARTTLS with its login, from a real SMTP server
(aiosmtpd), with the reason `test`."""

from email import message_from_bytes
from email.policy import default as default_policy

from lagwatch.services.notifier.sample import send_sample
from lagwatch.services.notifier.subscriptions import compile_subscription
from lagwatch.shared.notifications.subscriptions.documents import SOURCE_CONFIG
from lagwatch.shared.runtime.config import NotifierConfig, SubscriptionConfig
from tests.services.notifier.test_notifier_channels import certificate, email_subscription, smtp_server  # noqa: F401


async def test_an_email_subscription_gets_the_samples_open_and_close_as_mail(certificate):  # noqa: F811
    with smtp_server(certificate) as (port, mailbox):
        config = SubscriptionConfig(**email_subscription(port, extra_ca=certificate[0].read_text()))
        settings = NotifierConfig(allow_private_targets=True)
        sent = await send_sample(compile_subscription(config, SOURCE_CONFIG), settings, "prod", 1_800_000_000_000)
    assert [(s.kind, s.ok) for s in sent] == [("open", True), ("close", True)], sent
    messages = [message_from_bytes(e.content, policy=default_policy) for e in mailbox.envelopes]
    assert [m["Subject"] for m in messages] == [
        "[lagwatch] WARN: lagwatch-test on prod",
        "[lagwatch] Resolved: lagwatch-test on prod is OK again",
    ]
    assert {m["X-Lagwatch-Reason"] for m in messages} == {"test"}

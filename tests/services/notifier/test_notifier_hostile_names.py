"""A consumer group is named by whoever runs the consumer: whatever its name holds, the notifications about it show
the name as written — no Slack mention or link, no Teams link or bold text, no extra mail header — and still
arrive. The notifier runs against the Kafka mock (events on the status topic) and sends to real servers: an HTTP
receiver for Slack and Teams, aiosmtpd for e-mail."""

import json
import re
from email import message_from_bytes
from email.policy import default as default_policy

import pytest

from lagwatch.services.notifier.channels import slack
from lagwatch.services.notifier.channels.msteams import as_written
from lagwatch.services.notifier.messages import build_request
from lagwatch.services.notifier.service import NotifierService
from tests.kafka_helpers import eventually, running
from tests.services.notifier.test_notifier_channels import certificate, email_subscription, smtp_server  # noqa: F401 (a fixture)
from tests.services.notifier.test_notifier_delivery import config_for
from tests.services.notifier.test_notifier_messages import SLACK_URL, _hostile_events, delivery, sub
from tests.services.notifier.test_notifier_service import STATUS_TOPIC, publish
from tests.services.notifier.test_notifier_support import Receiver, Timeline, mailed, notification

MENTION, USER, LINK = "<!channel>", "<@U123>", "<https://evil.example|click here>"
MARKDOWN = "[click here](https://evil.example) **URGENT** _now_"
HEADER = "\r\nBcc: victim@evil.example\x1b[31m"
GROUP = f"{MENTION} {USER} {LINK} {MARKDOWN} & co{HEADER}"
RECIPIENTS = ["ops@example.com", "oncall@example.com"]


def mrkdwn_texts(message: dict) -> list[str]:
    """Every text of a Slack message that Slack parses as mrkdwn: the top-level `text` (what notifications show),
    and each mrkdwn text object of its blocks and its attachment's."""
    texts = [message["text"]]
    for block in message["blocks"] + message["attachments"][0]["blocks"]:
        objects = [block.get("text") or {}, *block.get("fields", []), *block.get("elements", [])]
        texts += [o["text"] for o in objects if o.get("type") == "mrkdwn"]
    return texts


def unescaped(text: str) -> list[str]:
    """What Slack would read as markup: an angle bracket, or an ampersand that does not start an entity."""
    return re.findall(r"[<>]|&(?!amp;|lt;|gt;)", text)


TEAMS_MARKUP = re.compile(r"(?<!\\)[\[\]*_`~<]")  # a markup character without its backslash


def card_texts(message: dict) -> list[str]:
    card = message["attachments"][0]["content"]
    texts = [block["text"] for block in card["body"] if block["type"] == "TextBlock"]
    facts = [fact for block in card["body"] if block["type"] == "FactSet" for fact in block["facts"]]
    return texts + [fact["title"] for fact in facts] + [fact["value"] for fact in facts]


async def test_a_hostile_group_name_is_shown_as_written_on_slack_teams_and_email(certificate, redis_server, kafka):  # noqa: F811
    kafka.create_topic(STATUS_TOPIC, 1)
    t = Timeline(GROUP)
    events = [t.to("OK"), t.to("ERR", (500, 0))]
    async with Receiver() as receiver:
        with smtp_server(certificate) as (port, mailbox):
            subscriptions = [
                {"id": "slack", "type": "slack", "url": receiver.url("/slack")},
                {"id": "teams", "type": "msteams", "url": receiver.url("/teams")},
                email_subscription(port, extra_ca=certificate[0].read_text(), to=RECIPIENTS),
            ]
            async with running(NotifierService(config_for(kafka, redis_server, subscriptions), "local", http_port=0)):
                await publish(kafka.bootstrap, *events)
                await receiver.wait_for(2, timeout=30)
                await eventually(lambda: mailed(mailbox), timeout=30)
    by_path = {r.path: r.json() for r in receiver.requests}

    slack = by_path["/slack"]
    assert {text: unescaped(text) for text in mrkdwn_texts(slack)} == {text: [] for text in mrkdwn_texts(slack)}
    assert slack["text"].startswith(":red_circle: ERR: &lt;!channel&gt; &lt;@U123&gt; &lt;https://evil.example|click")

    teams = by_path["/teams"]
    assert [t for t in card_texts(teams) if TEAMS_MARKUP.search(t)] == []
    facts = teams["attachments"][0]["content"]["body"][1]["facts"]
    group_fact = next(fact["value"] for fact in facts if fact["title"] == "Group")
    assert group_fact.startswith(r"\<!channel> \<@U123> \<https://evil.example|click here> \[click here\]")
    assert r"\*\*URGENT\*\* \_now\_" in group_fact

    (envelope,) = mailbox.envelopes
    mail = message_from_bytes(envelope.content, policy=default_policy)
    assert envelope.rcpt_tos == RECIPIENTS and mail["Bcc"] is None
    shown = f"{MENTION} {USER} {LINK} {MARKDOWN} & co\\r\\nBcc: victim@evil.example\\x1b[31m"
    assert mail["Subject"] == f"[lagwatch] ERR: {shown} on local"
    assert mail.get_content_type() == "text/plain" and not mail.is_multipart()  # no HTML to inject markup into
    text = mail.get_content()
    assert "\x1b" not in text and not any(line.startswith("Bcc:") for line in text.splitlines())


def test_every_mrkdwn_text_of_slacks_messages_escapes_the_names_top_level_text_included():
    """Status and lag-threshold messages, opened and closed: every text Slack parses as mrkdwn."""
    for event, kind in _hostile_events(GROUP, f"orders{MENTION}", f"client{LINK}"):
        for sent in (kind, "close" if kind == "open" else "lag-close"):
            request = build_request(sub(type="slack", url=SLACK_URL), delivery(event, sent))
            texts = mrkdwn_texts(json.loads(request.body))
            assert [t for t in texts if unescaped(t)] == [], sent
            assert "&lt;!channel&gt;" in texts[0], sent


def test_the_top_level_text_keeps_the_whole_title_escaped():
    event = Timeline(f"{MENTION} & {LINK}").to("ERR", (5,))
    assert slack.message(notification(event, "open"))["text"] == (
        ":red_circle: ERR: &lt;!channel&gt; &amp; &lt;https://evil.example|click here&gt; on local"
    )
    lag_event = next(e for e, kind in _hostile_events(MENTION, "orders", "c") if kind == "lag-open")
    assert "&lt;!channel&gt; on prod" in slack.message(notification(lag_event, "lag-open"))["text"]


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("[click here](https://evil.example)", r"\[click here\](https://evil.example)"),
        ("**URGENT** _now_ ~~old~~ `code`", r"\*\*URGENT\*\* \_now\_ \~\~old\~\~ \`code\`"),
        ("<at>Someone</at> a\\b", r"\<at>Someone\</at> a\\b"),
        ("- item\n1. first\n  # heading\n> quote", "\\- item\n1\\. first\n  \\# heading\n\\> quote"),
        ("billing-v2.orders 1.5 a -> b OK -> ERR", "billing-v2.orders 1.5 a -> b OK -> ERR"),  # nothing to escape
    ],
)
def test_teams_markdown_in_a_name_is_backslash_escaped(name, shown):
    assert as_written(name) == shown

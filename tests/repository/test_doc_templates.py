"""The documentation's template examples are safe to copy: rendered by the notifier (its template workers) for a
group whose name holds quotes, backslashes and a line break, each body is valid JSON with the names as written,
and each URL carries them URL-encoded."""

import json
import re
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from lagwatch.services.notifier.messages import build_request
from lagwatch.services.notifier.outbox import Delivery
from lagwatch.services.notifier.subscriptions import compile_subscription
from lagwatch.shared.runtime.config import SubscriptionConfig
from tests import paths
from tests.services.notifier.test_notifier_support import Timeline, typed

GROUP = '../../admin", "severity": "info", "x": "\\\n'  # ends the string, adds fields, breaks the JSON
TEAM = 'pay"ments'


def documented_templates() -> list[tuple[str, dict]]:
    """(doc, its YAML example) for each ```yaml block of docs/*.md holding a body-template."""
    found = []
    for doc in sorted(paths.DOCS.glob("*.md")):
        for block in re.findall(r"```yaml\n(.*?)```", doc.read_text(), flags=re.DOTALL):
            if "body-template:" in block:
                found.append((doc.name, yaml.safe_load(block)))
    return found


def test_the_docs_have_template_examples():
    assert [doc for doc, _ in documented_templates()] == ["webhooks.md"]


@pytest.mark.parametrize(("doc", "example"), documented_templates(), ids=lambda v: v if isinstance(v, str) else "")
def test_a_documented_template_puts_any_name_into_valid_json(doc, example):
    config = SubscriptionConfig(
        id="s",
        url="https://alerts.example.com/lagwatch",
        body_template=example["body-template"],
        url_template=example.get("url-template", ""),
        extras={"team": TEAM},
    )
    event = Timeline(GROUP).to("ERR", (5,))
    delivery = Delivery(f"{event['event_id']}.s", "s", "open", typed(event), event["event_id"], 0, attempts=1)
    request = build_request(compile_subscription(config, "config"), delivery)
    body = json.loads(request.body)
    assert "x" not in body and any(GROUP in value for value in body.values() if isinstance(value, str)), body
    assert TEAM in body.values()
    if "url-template" in example:  # the name is one query value: it moves no path, adds no parameter
        url = urlsplit(request.url)
        assert parse_qs(url.query) == {"group": [GROUP]} and url.path.count("/") == 1 and ".." not in url.path

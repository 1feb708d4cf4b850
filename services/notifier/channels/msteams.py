"""`msteams`: a Microsoft Teams channel through a Workflows webhook ("When a Teams webhook request is received",
Power Automate), which posts the Adaptive Card it is sent: a title coloured by status, the facts as a FactSet,
the worst partitions, and a button to `notifier.dashboard-url`. (Office 365 connectors, the older incoming
webhooks, are retired by Microsoft; Workflows take the same `message` envelope.)

Option: `url`, the workflow's HTTP POST URL (its `sig=` query is a credential: masked in api answers, never logged).
"""

from __future__ import annotations

import json
import re

from lagwatch.services.notifier.channels import Channel, summary
from lagwatch.shared.events.lag_threshold_event import is_lag_threshold_event
from lagwatch.shared.notifications.subscriptions.destinations import MSTEAMS
from lagwatch.shared.runtime.config import SubscriptionConfig

CARD_SCHEMA = "http://adaptivecards.io/schemas/adaptive-card.json"
CARD_VERSION = "1.4"  # what Teams renders
COLOUR = {"ERR": "Attention", "WARN": "Warning"}
# Teams reads a TextBlock's text and a fact's title and value as Markdown (bold, italic, links, lists): a group
# named "[click here](https://…) **URGENT**" would show a link and bold text. CommonMark's backslash escapes keep
# such characters as written: everywhere for inline markup, at a line's start for a list or heading marker.
_INLINE_MARKUP = re.compile(r"([\\`*_~\[\]<])")
_LINE_MARKUP = re.compile(r"^([ \t]*\d*)([-+#>.)])(?=\s|$)", re.MULTILINE)  # "- x", "# x", "> x", "1. x", "1) x"


def as_written(text: str) -> str:
    """`text` for Teams' Markdown, shown as written: its markup characters backslash-escaped."""
    return _LINE_MARKUP.sub(r"\1\\\2", _INLINE_MARKUP.sub(r"\\\1", text))


def card(event: dict, kind: str, ctx: dict, dashboard_url: str = "") -> dict:
    """The Adaptive Card."""
    if summary.is_close(kind):
        colour = "Good"
    else:
        colour = "Warning" if is_lag_threshold_event(event) else COLOUR.get(event["status"], "Default")
    body: list[dict] = [
        {
            "type": "TextBlock",
            "text": as_written(summary.title(event, kind, summary.reason(ctx))),
            "weight": "Bolder",
            "size": "Medium",
            "color": colour,
            "wrap": True,
        },
        {
            "type": "FactSet",
            "facts": [
                {"title": as_written(name), "value": as_written(value)}
                for name, value in summary.facts(event, kind, ctx)
            ],
        },
    ]
    worst = summary.worst_lines(event, kind)
    if worst:
        body.append({"type": "TextBlock", "text": "Worst partitions", "weight": "Bolder", "wrap": True})
        lines = "\n".join(f"- {as_written(line)}" for line in worst)
        body.append({"type": "TextBlock", "text": lines, "wrap": True})
    doc: dict = {"$schema": CARD_SCHEMA, "type": "AdaptiveCard", "version": CARD_VERSION, "body": body}
    if dashboard_url:
        doc["actions"] = [
            {"type": "Action.OpenUrl", "title": "Open in lagwatch", "url": summary.link(dashboard_url, event)}
        ]
    return doc


def message(event: dict, kind: str, ctx: dict, dashboard_url: str = "") -> dict:
    """The Workflows envelope: one attachment holding the card."""
    return {
        "type": "message",
        "attachments": [
            {
                "contentType": "application/vnd.microsoft.card.adaptive",
                "contentUrl": None,
                "content": card(event, kind, ctx, dashboard_url),
            }
        ],
    }


def body(config: SubscriptionConfig, event: dict, kind: str, ctx: dict, dashboard_url: str) -> bytes:
    return json.dumps(message(event, kind, ctx, dashboard_url)).encode()


CHANNEL = Channel(MSTEAMS, body)

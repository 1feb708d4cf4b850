"""`msteams`: an Adaptive Card posted through a Teams Workflows webhook (docs/webhooks.md#other-destinations; the
retired Office 365 connectors took the same `message` envelope). The workflow URL's `sig=` query is a credential."""

from __future__ import annotations

import re
from typing import Any

from lagwatch.services.notifier.channels import Channel, Notification, json_body, summary
from lagwatch.shared.events.lag_threshold_event import LagThresholdEvent
from lagwatch.shared.notifications.subscriptions.destinations import MSTEAMS

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


def card(note: Notification) -> dict[str, Any]:
    event = note.event
    if note.closing:
        colour = "Good"
    else:
        colour = "Warning" if isinstance(event, LagThresholdEvent) else COLOUR.get(event.status, "Default")
    title = as_written(summary.title(event, note.kind, note.reason))
    facts = [
        {"title": as_written(k), "value": as_written(v)} for k, v in summary.facts(event, note.kind, note.duration_s)
    ]
    body: list[dict[str, Any]] = [
        {"type": "TextBlock", "text": title, "weight": "Bolder", "size": "Medium", "color": colour, "wrap": True},
        {"type": "FactSet", "facts": facts},
    ]
    worst = summary.worst_lines(event, note.kind)
    if worst:
        body.append({"type": "TextBlock", "text": "Worst partitions", "weight": "Bolder", "wrap": True})
        lines = "\n".join(f"- {as_written(line)}" for line in worst)
        body.append({"type": "TextBlock", "text": lines, "wrap": True})
    doc: dict[str, Any] = {"$schema": CARD_SCHEMA, "type": "AdaptiveCard", "version": CARD_VERSION, "body": body}
    if note.dashboard_url:
        doc["actions"] = [{"type": "Action.OpenUrl", "title": "Open in lagwatch", "url": note.link}]
    return doc


def message(note: Notification) -> dict[str, Any]:
    """The Workflows envelope: one attachment holding the card."""
    adaptive = "application/vnd.microsoft.card.adaptive"
    return {"type": "message", "attachments": [{"contentType": adaptive, "contentUrl": None, "content": card(note)}]}


CHANNEL = Channel(MSTEAMS.type, json_body(message), MSTEAMS)

"""`webhook`: the event exactly as on its topic, POSTed to `url` (docs/webhooks.md#webhooks); Burrow's HTTP notifier
options (`url-close`, `method-close`, `username`) apply as messages.py says."""

from __future__ import annotations

from lagwatch.services.notifier.channels import Channel

CHANNEL = Channel("webhook", lambda note: note.event.encode())

"""`webhook`: the event exactly as on its topic (a status-change or lag-threshold event, the bytes the evaluator
publishes), POSTed to `url` — or the subscription's `body-template`, and its `url-template`. Burrow's HTTP notifier
options apply: closes (close, lag-close) go to `url-close` with `method-close` when set, `username` adds basic auth."""

from __future__ import annotations

from lagwatch.services.notifier.channels import Channel

CHANNEL = Channel("webhook", lambda note: note.event.encode())

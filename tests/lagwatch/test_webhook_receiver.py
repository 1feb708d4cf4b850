"""The demo's stand-in endpoint prints one line per alert, whatever kind of event the notifier sent."""

import json

from lagwatch.devkit.webhook_receiver import VALID, ReceivedAlert


def alert(body: dict, kind: str = "open") -> ReceivedAlert:
    return ReceivedAlert(0.0, "webhook", kind, "n-1", "sub", "0", "sha256=x", VALID, json.dumps(body))


def test_a_status_event_names_its_worst_partitions():
    event = {"group": "g", "cluster": "c", "previous_status": "OK", "status": "WARN", "totallag": 3}
    event["partitions"] = [{"topic": "orders", "partition": 3, "status": "STALL", "current_lag": 3}]

    assert alert(event).summary().endswith("g on c: OK -> WARN, total lag 3 (orders/3 STALL lag 3)  [signature ok]")


def test_a_lag_threshold_event_whose_partitions_have_no_status_is_summarised_too():
    """These partitions carry lag in seconds instead of a status (docs/status-topic.md): the demo printed a
    traceback for them and answered the notifier 500. Nor has the event a transition: the line names the alert, its
    threshold and whether it starts or ends (it printed "None -> OK")."""
    event = {"kind": "lag_threshold", "alert": "lag-seconds", "above": True, "threshold_seconds": 30.0}
    event |= {"group": "g", "cluster": "c", "status": "OK", "totallag": 0}
    event["partitions"] = [{"topic": "orders", "partition": 1, "current_lag": 6011, "lag_seconds": 42}]

    line = alert(event, "lag-open").summary()
    assert (
        "g on c: lag-seconds alert (threshold 30.0 s) starts, status OK, total lag 0 (orders/1 lag 6011 (42 s))" in line
    )

    event |= {"alert": "data-loss-risk", "above": False, "threshold_seconds": 5.0}
    line = alert(event, "lag-close").summary()
    assert "g on c: data-loss-risk alert (threshold 5.0 s) ends, status OK, total lag 0" in line and "None" not in line


def test_a_hostile_group_name_cannot_add_a_line_or_drive_the_demos_terminal():
    """The demo prints each alert's line on its console: a group name's line breaks and escape sequences show as
    escapes."""
    event = {"group": "g\n12:00:00  ALERT webhook close forged\x1b[2J", "cluster": "c", "previous_status": "OK"}
    event |= {"status": "ERR", "totallag": 3, "partitions": [{"topic": "t\r\x9b1m", "partition": 0, "current_lag": 3}]}
    slack = ReceivedAlert(0.0, "slack", "open", "n-1", "sub", "0", "sha256=x", VALID, json.dumps({"text": "a\nb"}))

    line = alert(event).summary()
    assert line.isprintable() and "g\\n12:00:00  ALERT webhook close forged\\x1b[2J on c" in line
    assert "t\\r\\x9b1m/0" in line
    assert slack.summary().endswith("a\\nb  [signature ok]")

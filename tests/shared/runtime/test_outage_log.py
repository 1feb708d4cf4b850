"""An outage is said when it begins, reminded every few minutes while it lasts, and said to be over once; the
retries between go to debug (they used to be one warning each)."""

import logging

from lagwatch.shared.runtime.outage_log import OutageLog

log = logging.getLogger("lagwatch.test.outage")


def said(caplog) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == log.name]


def test_an_outage_is_one_warning_a_reminder_and_one_line_when_over(caplog):
    now = [100.0]
    outage = OutageLog(log, "evaluator prod: schedule unreadable", remind_s=300, clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger=log.name)
    for _ in range(120):  # two minutes of retries every second
        outage.failed(ConnectionError("Connection refused"))
        now[0] += 1
    assert said(caplog) == [
        (logging.WARNING, "evaluator prod: schedule unreadable (Connection refused); retrying"),
    ]
    now[0] = 400.0  # five minutes in
    outage.failed(ConnectionError("Connection refused"), "retrying in 5.0s")
    now[0] = 430.0
    outage.ok()
    outage.ok()  # and nothing more while it goes well
    assert said(caplog)[1:] == [
        (
            logging.WARNING,
            "evaluator prod: schedule unreadable for 300 s now (121 tries failed; Connection refused);"
            " retrying in 5.0s",
        ),
        (logging.INFO, "evaluator prod: schedule unreadable: over after 330 s (121 tries failed)"),
    ]


def test_the_retries_between_are_there_at_debug_and_a_new_outage_is_said_again(caplog):
    now = [0.0]
    outage = OutageLog(log, "notifier: outbox unavailable", clock=lambda: now[0])
    caplog.set_level(logging.DEBUG, logger=log.name)
    outage.failed("down")
    outage.failed("still down")
    outage.ok()
    outage.failed("down again")
    assert [level for level, _ in said(caplog)] == [logging.WARNING, logging.DEBUG, logging.INFO, logging.WARNING]
    assert outage.failures == 1


def test_news_of_an_outage_going_on_is_said_and_the_end_can_be_worded(caplog):
    now = [0.0]
    outage = OutageLog(log, "leaders did not answer", ended="every leader answers again", clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger=log.name)
    outage.failed("t[0]", "samples wait")
    outage.failed("t[0]", "samples wait")  # the same: not said
    now[0] = 10.0
    outage.failed("t[1]", "samples wait", news=True)  # more of it away: said
    outage.ok()
    assert said(caplog) == [
        (logging.WARNING, "leaders did not answer (t[0]); samples wait"),
        (logging.WARNING, "leaders did not answer (t[1]); samples wait"),
        (logging.INFO, "every leader answers again after 10 s (3 tries failed)"),
    ]

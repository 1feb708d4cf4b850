"""When lagwatch reports its own progress (services/ingest/own_progress.py): every second, but not while records the
log-end poller already saw are still being stored, which read as lag of a worker that keeps up."""

from lagwatch.services.ingest.own_progress import REPORT_EVERY_S, WAIT_FOR_POLLED_S, report_due

POSITIONS = {3: 120, 7: 45}


def test_a_report_is_due_every_second():
    assert not report_due(REPORT_EVERY_S - 0.01, POSITIONS, {3: 120, 7: 45})
    assert report_due(REPORT_EVERY_S, POSITIONS, {3: 120, 7: 45})


def test_it_waits_while_the_poller_has_seen_records_not_stored_yet():
    polled_ahead = {3: 121, 7: 45}  # a commit appended to partition 3, polled, in the batch being stored
    assert not report_due(REPORT_EVERY_S + 0.1, POSITIONS, polled_ahead)
    assert report_due(REPORT_EVERY_S + 0.1, {3: 121, 7: 45}, polled_ahead)  # stored: reported with no lag


def test_an_ingest_really_behind_reports_its_lag_after_the_wait():
    far_ahead = {3: 5_000, 7: 45}
    assert not report_due(REPORT_EVERY_S + WAIT_FOR_POLLED_S - 0.01, POSITIONS, far_ahead)
    assert report_due(REPORT_EVERY_S + WAIT_FOR_POLLED_S, POSITIONS, far_ahead)


def test_partitions_not_polled_yet_hold_nothing_back():
    assert report_due(REPORT_EVERY_S, POSITIONS, {3: None})
    assert report_due(REPORT_EVERY_S, POSITIONS, {})

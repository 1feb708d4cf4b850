"""A partition whose offsets' lag the log probe found to be transaction markers only (`StoredPartition.markers_only`):
its status says so beside Burrow's fields, and the ready result keeps the log end up to which it holds, so readers
that derive lags from the latest log ends read 0 there, and the offsets' lag once the log end moves on."""

import json

from lagwatch.shared.protocol.types import OffsetEntry, ProbedLog, RuleConfig, Status
from lagwatch.shared.statuses.results_store import GroupResult, PartitionResult, decode_result, result_of
from lagwatch.shared.statuses.rules import partition_status
from lagwatch.shared.statuses.verdicts import stored_group_status, stored_partition_status
from lagwatch.shared.windows.packing import pack_commit_ring
from lagwatch.shared.windows.stored_group import StoredGroup, StoredPartition

NOW = 1_767_225_600_000
COMMITTED, LOG_END = 62, 63  # the last record + 1; the commit marker of its transaction lies at 62
INTERVALS = 3
BURROWS_FIELDS = ["topic", "partition", "owner", "client_id", "status", "start", "end", "current_lag", "complete"]


def stalled(probe: ProbedLog | None, log_end: int = LOG_END) -> StoredPartition:
    """A full window standing at COMMITTED with lag 1 at every commit: by offsets alone, STALL."""
    entries = [OffsetEntry(COMMITTED, NOW - (3 - i) * 60_000, NOW - (3 - i) * 60_000, 1, i, i) for i in range(3)]
    return StoredPartition("payments", 0, pack_commit_ring(entries), [log_end] * 3, "/10.0.0.1", "eos-1", probe=probe)


CAUGHT_UP = ProbedLog(COMMITTED, LOG_END, None, None, NOW)


def test_a_markers_only_partition_reads_ok_with_lagwatchs_fields_beside_burrows():
    part = stalled(CAUGHT_UP)
    fast = stored_partition_status(part, INTERVALS, NOW, RuleConfig())  # rule 1 from the ring's ends
    assert fast == partition_status(part.to_rule_input(INTERVALS), NOW, RuleConfig())
    body = fast.to_json()
    assert list(body) == [*BURROWS_FIELDS, "lag_kind", "unread_records"]
    assert (body["status"], body["current_lag"], body["end"]["offset"]) == ("OK", 0, COMMITTED)
    assert (body["lag_kind"], body["unread_records"]) == ("transaction-markers", 0)


def test_without_the_probes_word_burrows_object_is_unchanged():
    moved_on = stalled(CAUGHT_UP, log_end=LOG_END + 21)  # a new transaction since: the answer no longer holds
    unread = stalled(ProbedLog(COMMITTED, LOG_END, COMMITTED, NOW - 5_000, NOW))
    for part, lag in ((stalled(None), 1), (moved_on, 22), (unread, 1)):
        body = stored_partition_status(part, INTERVALS, NOW, RuleConfig()).to_json()
        assert list(body) == BURROWS_FIELDS
        assert (body["status"], body["current_lag"]) == ("STALL", lag)


def test_the_ready_result_keeps_the_log_end_the_answer_holds_at():
    group = StoredGroup("local", "eos", NOW, [stalled(CAUGHT_UP)])
    status = stored_group_status(group, INTERVALS, NOW, RuleConfig())
    assert (status.status, status.totallag) == (Status.OK, 0)
    result = result_of(status, NOW, [], {}, NOW, INTERVALS)
    [part] = result.partitions
    assert part.markers_end == LOG_END
    assert (part.lag(LOG_END), part.lag(LOG_END + 21), part.lag(None)) == (0, 22, 0)
    [encoded] = json.loads(result.encode())[3]
    assert encoded[6:] == [0, LOG_END]  # lower bound 0, then the markers' end
    assert decode_result("eos", result.encode()) == result


def test_results_without_markers_encode_as_before():
    plain = PartitionResult("t", 0, Status.OK, 400, 10, -2)
    lower = PartitionResult("t", 1, Status.WARN, 300, 10, NOW - 7_200_000, True)
    both = PartitionResult("t", 2, Status.OK, 62, 10, -2, True, 63)
    raw = GroupResult("g", Status.WARN, NOW, (), (plain, lower, both)).encode()
    parts = json.loads(raw)[3]
    assert parts == [["t", 0, 1, 400, 10, -2], ["t", 1, 2, 300, 10, NOW - 7_200_000, 1], ["t", 2, 1, 62, 10, -2, 1, 63]]
    assert decode_result("g", raw).partitions == (plain, lower, both)

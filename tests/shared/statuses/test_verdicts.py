"""The rules on a partition as stored (verdicts.stored_partition_status) read its packed ring where they can: a
caught-up partition from the ring's ends, a lagging one from its entries without a padded rule input. Either way the
verdict is the reference's, `partition_status` on the partition's rule input."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lagwatch.shared.protocol.types import OffsetEntry, ProbedLog, RuleConfig
from lagwatch.shared.statuses.rules import partition_status
from lagwatch.shared.statuses.verdicts import stored_partition_status
from lagwatch.shared.windows.packing import pack_commit_ring
from lagwatch.shared.windows.stored_group import StoredPartition

NOW = 1_700_000_000_000
OFFSETS = st.integers(0, 400)
ENTRIES = st.builds(
    OffsetEntry,
    OFFSETS,
    st.integers(NOW - 600_000, NOW),
    st.one_of(st.none(), st.integers(NOW - 600_000, NOW)),
    st.one_of(st.none(), st.integers(0, 300)),
    order=st.just(0),
    first_order=st.just(0),
)
PROBES = st.one_of(
    st.none(), st.builds(ProbedLog, OFFSETS, OFFSETS, st.one_of(st.none(), OFFSETS), st.none(), st.just(NOW))
)


@st.composite
def stored_partitions(draw) -> StoredPartition:
    entries = sorted(draw(st.lists(ENTRIES, max_size=12)), key=lambda e: e.timestamp)
    broker = draw(st.lists(OFFSETS, max_size=4))
    return StoredPartition("t", 0, pack_commit_ring(entries), broker, "host", "client", probe=draw(PROBES))


@settings(max_examples=600, deadline=None)
@given(
    part=stored_partitions(),
    intervals=st.integers(-1, 12),
    allowed=st.sampled_from([0, 5, 50]),
    minimum=st.integers(1, 4),
    now=st.integers(NOW - 60_000, NOW + 900_000),
)
def test_a_stored_partitions_verdict_is_the_rules_on_its_rule_input(part, intervals, allowed, minimum, now):
    rules = RuleConfig(allowed_lag=allowed, minimum_entries=minimum)
    reference = partition_status(part.to_rule_input(intervals), now, rules)
    assert stored_partition_status(part, intervals, now, rules) == reference

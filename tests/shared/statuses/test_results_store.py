"""The ready results the evaluator stores (shared/statuses/results_store.py): unchanged ones are not written again,
and their bytes are the standard library's JSON whoever writes them."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import Status
from lagwatch.shared.statuses.results_store import GroupResult, PartitionResult, ResultsStore, decode_result

CLUSTER = "local"


def result(status: Status, newest: int) -> GroupResult:
    return GroupResult("billing", status, 1_000, partitions=(PartitionResult("orders", 0, status, newest, 4, -1),))


async def test_a_result_is_written_when_it_changed_and_again_once_forgotten(redis):
    store = ResultsStore(redis)
    assert await store.write(CLUSTER, {"billing": result(Status.OK, 100)}) == 1
    await redis.hset(keys.group_results(CLUSTER), "billing", b"by hand")  # shows whether the next writes happen
    assert await store.write(CLUSTER, {"billing": result(Status.OK, 100)}) == 0  # unchanged: Redis not written
    assert await redis.hget(keys.group_results(CLUSTER), "billing") == b"by hand"
    assert await store.write(CLUSTER, {"billing": result(Status.WARN, 100)}) == 1
    assert await store.write(CLUSTER, {"billing": result(Status.WARN, 101)}) == 1
    raw = await redis.hget(keys.group_results(CLUSTER), "billing")
    assert decode_result("billing", raw) == result(Status.WARN, 101)
    store.forget(CLUSTER, ["billing"])  # moved to another evaluator, then back: written again
    assert await store.write(CLUSTER, {"billing": result(Status.WARN, 101)}) == 1
    assert await store.write("other", {"billing": result(Status.WARN, 101)}) == 1  # each cluster its own
    assert await store.write(CLUSTER, {"billing": None}) == 1 and await store.groups(CLUSTER) == []
    assert await store.write(CLUSTER, {"billing": result(Status.WARN, 101)}) == 1  # NOTFOUND, then back


async def test_a_result_written_keeps_the_sparklines_fingerprint_and_a_sparkline_drawn_the_results(redis):
    """One fingerprint of each per group, in one int: writing either keeps the other; forgetting forgets both."""
    store, windows = ResultsStore(redis), -abs(hash((b"\x02" * 48,)))  # hashes are signed
    assert not store.sparkline_drawn(CLUSTER, "billing", windows)
    store.drew(CLUSTER, "billing", windows)
    assert not store.sparkline_drawn("other", "billing", windows) and not store.sparkline_drawn(CLUSTER, "x", windows)
    assert await store.write(CLUSTER, {"billing": result(Status.OK, 100)}) == 1
    assert store.sparkline_drawn(CLUSTER, "billing", windows)
    store.drew(CLUSTER, "billing", windows + 1)
    assert await store.write(CLUSTER, {"billing": result(Status.OK, 100)}) == 0  # the result's fingerprint kept
    assert await store.write(CLUSTER, {"billing": result(Status.WARN, 100)}) == 1
    assert store.sparkline_drawn(CLUSTER, "billing", windows + 1)
    store.forget(CLUSTER, ["billing"])
    assert not store.sparkline_drawn(CLUSTER, "billing", windows + 1)
    assert await store.write(CLUSTER, {"billing": result(Status.WARN, 100)}) == 1


TOPICS = st.one_of(st.text(max_size=8), st.text(alphabet='0123456789e.-:,[]\x7fé\u2028"\\', max_size=8))
FLOATS = st.one_of(
    st.none(), st.floats(allow_nan=False, allow_infinity=False), st.floats(1e15, 1e18), st.floats(-1e-3, 1e-3)
)
PARTITION_RESULTS = st.builds(
    PartitionResult,
    TOPICS,
    st.integers(0, 2**31),
    st.sampled_from(list(Status)),
    st.one_of(st.none(), st.integers(0, 2**62)),
    st.integers(0, 30),
    st.integers(-2, 2**45),
    st.booleans(),
    st.one_of(st.none(), st.integers(0, 2**62)),
)


@settings(max_examples=400, deadline=None)
@given(
    partitions=st.lists(PARTITION_RESULTS, max_size=4),
    growth=FLOATS,
    anchors=st.tuples(st.integers(-4, 2**45), st.integers(-1, 2**45), st.integers(0, 2**40)),
)
def test_a_result_written_by_msgspec_where_it_can_has_the_standard_librarys_bytes(partitions, growth, anchors):
    catchup, retention, skipped = anchors
    stored = GroupResult("g", Status.WARN, 1, (5, 6), tuple(partitions), catchup, growth, retention, skipped)
    assert stored.encode() == json.dumps(stored.stored_array(), separators=(",", ":")).encode()

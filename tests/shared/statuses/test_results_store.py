"""The ready results the evaluator stores (shared/statuses/results_store.py): unchanged ones are not written again."""

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

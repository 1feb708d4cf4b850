"""The log probe's answers in Redis (`keys.log_probes`: one hash per topic, partition -> answer), written by the
ingest worker that probed and read with the windows (`window_reads.py`), so the evaluator, the api and /metrics judge
a partition the same way: a consumer with nothing readable past its committed offset (only transaction markers or
aborted records up to the log end) is caught up, whatever the offsets say (shared/windows/stored_group.py).

An answer is "<committed> <log end> <unread from> <unread ms> <probed at>", -1 for none: text, as the rest of a
topic's hashes are numbers a person can read in redis-cli."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from redis.asyncio import Redis

from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import ProbedLog

TopicPartition = tuple[str, int]


def encode_probe(answer: ProbedLog) -> bytes:
    fields = (answer.committed, answer.log_end, answer.unread_from, answer.unread_ms, answer.probed_at)
    return " ".join(str(-1 if n is None else n) for n in fields).encode()


def decode_probe(raw: bytes | str | None) -> ProbedLog | None:
    """None for no answer, or one that cannot be read (a hand edit must not fail every read)."""
    if raw is None:
        return None
    try:
        committed, log_end, unread_from, unread_ms, probed_at = (int(n) for n in raw.split())
    except ValueError:
        return None
    return ProbedLog(
        committed, log_end, None if unread_from < 0 else unread_from, None if unread_ms < 0 else unread_ms, probed_at
    )


async def store_probes(redis: Redis, cluster: str, answers: Iterable[tuple[TopicPartition, ProbedLog]]) -> None:
    """One HSET per topic and kind, in one pipeline (no transaction: each hash stands alone). Caught-up answers and
    those with an unread record are kept apart: groups committed at different offsets of one partition want both
    (one reads OK past the markers, another its lag in seconds)."""
    by_key: dict[str, dict[int, bytes]] = defaultdict(dict)
    for (topic, partition), answer in answers:
        kind = keys.log_probes if answer.unread_from is None else keys.log_probes_unread
        by_key[kind(cluster, topic)][partition] = encode_probe(answer)
    if not by_key:
        return
    async with redis.pipeline(transaction=False) as pipe:
        for hash_key, fields in by_key.items():
            pipe.hset(hash_key, mapping=fields)
        await pipe.execute()


def probes_of(raw: Mapping[TopicPartition, bytes | None]) -> dict[TopicPartition, ProbedLog]:
    """The readable answers of a topic-fields read (`WindowReads._topic_fields`) of either hash."""
    decoded = ((tp, decode_probe(value)) for tp, value in raw.items())
    return {tp: answer for tp, answer in decoded if answer is not None}

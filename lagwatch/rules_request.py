"""The JSON contract of `lagwatch rules eval`: parse a request, evaluate it with the rules, shape the answer.

Request: {"now_ms", "config": {"allowed_lag", "minimum_complete"}, "cluster", "group",
          "partitions": [{"topic", "partition", "offsets": [{"offset", "timestamp", "lag"} | null, ...],
                          "broker_offsets": [int, ...], "current_lag"}]}
Answer:  {"cluster", "group", "status", "complete", "partition_count", "totallag", "maxlag",
          "partitions": [{"topic", "partition", "status", "start", "end", "current_lag", "complete"}]}
Other tools rely on these shapes; `../shared/spec/seed_examples.json` is written in them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lagwatch.shared.protocol.types import GroupStatus, OffsetEntry, PartitionInput, PartitionStatus, RuleConfig
from lagwatch.shared.statuses.rules import group_status


class RequestError(ValueError):
    """The request is not of the contract's form; the message says where."""


def evaluate_request(doc: Any) -> dict[str, Any]:
    """Parse the request (fields checked in the contract's order), evaluate it with the rules, shape the answer."""
    body = _object(doc, "request")
    config = _object(body.get("config", {}), "config")
    parts = body.get("partitions")
    if not isinstance(parts, list):
        raise RequestError("partitions: expected a list")
    now_ms = _int(body.get("now_ms"), "now_ms")
    rules = RuleConfig(
        allowed_lag=_int(config.get("allowed_lag", 0), "config.allowed_lag", minimum=0),
        minimum_complete=_number(config.get("minimum_complete", 0.0), "config.minimum_complete"),
        minimum_entries=_int(
            config.get("minimum_entries", RuleConfig().minimum_entries), "config.minimum_entries", minimum=1
        ),
    )
    cluster, group = _str(body.get("cluster"), "cluster"), _str(body.get("group"), "group")
    partitions = tuple(_partition(p, f"partitions[{i}]") for i, p in enumerate(parts))
    return group_answer(group_status(cluster, group, partitions, now_ms, rules))


def _partition(doc: Any, where: str) -> PartitionInput:
    body = _object(doc, where)
    offsets = body.get("offsets")
    if not isinstance(offsets, list):
        raise RequestError(f"{where}.offsets: expected a list")
    brokers = body.get("broker_offsets", [])
    if not isinstance(brokers, list):
        raise RequestError(f"{where}.broker_offsets: expected a list")
    return PartitionInput(
        topic=_str(body.get("topic"), f"{where}.topic"),
        partition=_int(body.get("partition"), f"{where}.partition", minimum=0),
        offsets=tuple(_entry(o, f"{where}.offsets[{i}]") for i, o in enumerate(offsets)),
        broker_offsets=tuple(_int(b, f"{where}.broker_offsets[{i}]") for i, b in enumerate(brokers)),
        current_lag=_int(body.get("current_lag", 0), f"{where}.current_lag", minimum=0),
    )


def _entry(doc: Any, where: str) -> OffsetEntry | None:
    if doc is None:
        return None
    body = _object(doc, where)
    lag = body.get("lag")
    observed = body.get("observedAt")
    return OffsetEntry(
        offset=_int(body.get("offset"), f"{where}.offset"),
        timestamp=_int(body.get("timestamp"), f"{where}.timestamp"),
        observed_at=None if observed is None else _int(observed, f"{where}.observedAt"),
        lag=None if lag is None else _int(lag, f"{where}.lag", minimum=0),
    )


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise RequestError(f"{where}: expected an object")
    return value


def _int(value: Any, where: str, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{where}: expected an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise RequestError(f"{where}: must be >= {minimum}, got {value}")
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RequestError(f"{where}: expected a number, got {value!r}")
    return float(value)


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise RequestError(f"{where}: expected a string, got {value!r}")
    return value


def group_answer(status: GroupStatus) -> dict[str, Any]:
    return {
        "cluster": status.cluster,
        "group": status.group,
        "status": status.status.name,
        "complete": status.complete,
        "partition_count": status.partition_count,
        "totallag": status.totallag,
        "maxlag": _partition_answer(status.maxlag) if status.maxlag else None,
        "partitions": [_partition_answer(p) for p in status.partitions],
    }


def _partition_answer(p: PartitionStatus) -> dict[str, Any]:
    """The status object of Burrow's API without owner and client id, which the contract does not carry."""
    body = p.to_json()
    del body["owner"], body["client_id"]
    return body

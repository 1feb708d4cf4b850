"""A record of the offsets topic built by hand, readable like a consumed one (`records.RecordLike`)."""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RawRecord:
    key_bytes: bytes | None
    value_bytes: bytes | None
    partition_number: int = 0
    offset_number: int = 0
    timestamp_ms: int = 0

    def key(self) -> bytes | None:
        return self.key_bytes

    def value(self) -> bytes | None:
        return self.value_bytes

    def partition(self) -> int:
        return self.partition_number

    def offset(self) -> int:
        return self.offset_number

    def timestamp(self) -> tuple[int, int]:
        return (1, self.timestamp_ms)  # (TIMESTAMP_CREATE_TIME, ms), as confluent-kafka gives it

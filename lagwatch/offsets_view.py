"""What `lagwatch offsets decode` prints: a decoded `__consumer_offsets` record as JSON."""

from __future__ import annotations

import contextlib
import re
from dataclasses import asdict
from typing import Any

from lagwatch.shared.records.group_records import RECORD_CLASSES as GROUP_RECORD_CLASSES
from lagwatch.shared.records.offsets_codec import (
    CodecError,
    ConsumerGroupAssignment,
    ConsumerGroupMember,
    GroupMember,
    GroupMetadata,
    OffsetCommit,
    OtherRecord,
    Record,
)

_KINDS = {
    OffsetCommit: "offset_commit",
    GroupMetadata: "group_metadata",
    ConsumerGroupMember: "consumer_group_member",
    ConsumerGroupAssignment: "consumer_group_assignment",
    OtherRecord: "other",
    # share- and streams-group records: the class name in snake case (ShareGroupMember -> share_group_member)
    **{cls: re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower() for cls in GROUP_RECORD_CLASSES.values()},
}
_MEMBER_FIELDS = ("member_id", "group_instance_id", "client_id", "client_host", "session_timeout", "rebalance_timeout")


def record_to_json(record: Record) -> dict[str, Any]:
    """The record's kind and fields (those absent from its version are null); a group's members with their
    assignments decoded, and without the state timestamp."""
    view: dict[str, Any] = {"kind": _KINDS[type(record)], **asdict(record)}
    if isinstance(record, GroupMetadata):
        del view["current_state_timestamp"]
        consumer = record.protocol_type == "consumer"
        view["members"] = [_member_json(member, consumer) for member in record.members]
    return view


def _member_json(member: GroupMember, consumer_protocol: bool) -> dict[str, Any]:
    # Only the "consumer" protocol type carries ConsumerProtocolAssignment bytes (Connect does not), and
    # a bad assignment must not hide the rest of the record: both show as null.
    assignment: dict[str, list[int]] | None = None
    if consumer_protocol:
        with contextlib.suppress(CodecError):
            assignment = member.partitions()
    return {**{name: getattr(member, name) for name in _MEMBER_FIELDS}, "assignment": assignment}

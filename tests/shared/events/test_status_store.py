"""The status store's recent-changes entry copies a few fields of the event (status_store.summary_source): read by
msgspec without the rest of the event, it copies what the standard library's whole read of the JSON copies."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from lagwatch.shared.events.status_store import SUMMARY_FIELDS, _json_object, summary_source
from tests.shared.events.test_event_codec import status_events

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
FIELD_NAMES = st.sampled_from([*SUMMARY_FIELDS, "partitions", "group", "é"])


def reference(raw: bytes) -> dict:
    from_event = _json_object(raw)
    return {name: from_event[name] for name in SUMMARY_FIELDS if name in from_event}


@settings(max_examples=300, deadline=None)
@given(event=status_events())
def test_an_events_summary_fields_are_the_ones_its_json_holds(event):
    raw = event.encode()
    assert summary_source(raw) == reference(raw) and summary_source(raw).keys() == set(SUMMARY_FIELDS) - {
        name for name in ("max_lag_seconds", "max_lag_seconds_lower_bound") if name not in json.loads(raw)
    }


@settings(max_examples=400, deadline=None)
@given(doc=st.dictionaries(FIELD_NAMES, JSON_VALUES, max_size=6), ascii_only=st.booleans())
def test_any_json_object_gives_the_fields_the_reference_reads(doc, ascii_only):
    raw = json.dumps(doc, ensure_ascii=ascii_only).encode()
    assert summary_source(raw) == reference(raw)


def test_what_is_not_a_json_object_or_msgspec_refuses_is_read_by_the_reference():
    for raw in (b"[1, 2]", b"nul", b'{"totallag": NaN, "event_id": "e"}', b"\xef\xbb\xbf{}", b'{"event_id": "\xff"}'):
        assert summary_source(raw) == reference(raw)
    assert summary_source(b'{"totallag": Infinity}') == {"totallag": float("inf")}

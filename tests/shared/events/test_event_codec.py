"""The events as typed, frozen msgspec Structs with one JSON codec (shared/events/event_codec.py): the Structs and the
published JSON schemas describe the same fields, the bytes on the wire are the ones the evaluator always
published, a record decodes back to the event it was, and a record that is not an event is refused naming why."""

from __future__ import annotations

import json
import re
import types
from enum import Enum
from typing import Literal, Union, get_args, get_origin

import jsonschema
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec import UNSET, UnsetType

from lagwatch.services.notifier.events import parse_lag_event, parse_status_event
from lagwatch.shared.events import event_codec, lag_threshold_event, status_event
from lagwatch.shared.events.event_codec import EventDecodeError, from_document, read_partial
from lagwatch.shared.events.lag_threshold_event import Alert, Crossing, LagPartition, LagThresholdEvent, Reason
from lagwatch.shared.events.status_event import (
    EventPartition,
    ExplanationFields,
    Incident,
    RetentionFields,
    StatusEvent,
    VelocityFields,
)
from lagwatch.shared.notifications.subscriptions.notification_policy import IncidentState
from lagwatch.shared.protocol.types import Status
from lagwatch.shared.statuses.explanation import Explanation
from lagwatch.shared.statuses.retention import RetentionRisk, group_risk
from lagwatch.shared.statuses.time_lag import TimeLag
from lagwatch.shared.statuses.velocity import CatchUp, Velocity, group_velocity
from tests import paths
from tests.services.notifier.test_notifier_support import group_status

replace = msgspec.structs.replace

DATA = paths.DATA
NOW = 1_700_000_060_000
LAGS = {("orders", 0): TimeLag(420.5, True), ("orders", 1): TimeLag(0.0)}
SPEEDS = {("orders", 0): Velocity(2.0, 5.0, 900, CatchUp.NEVER, None)}
RISKS = {("orders", 0): RetentionRisk(120.0, 0, "log-start"), ("orders", 1): RetentionRisk(None)}
WHY = Explanation("stalled", "stalled")


def known_status_event() -> StatusEvent:
    return status_event.build_event(
        cluster="prod",
        group="billing",
        seq=2,
        previous=Status.OK,
        group_status=group_status("prod", "billing", Status.ERR, (900, 0)),
        incident=Incident("inc-1", 1_700_000_000_000),
        evaluated_at=NOW,
        time_lags=LAGS,
        velocities=SPEEDS,
        explanation=WHY,
        retention=RISKS,
    )


def known_lag_event() -> LagThresholdEvent:
    return lag_threshold_event.build_event(
        cluster="prod",
        group="billing",
        crossing=Crossing(600.0, True, Reason.RETENTION, Alert.DATA_LOSS_RISK),
        seq=1,
        incident_started_at=1_700_000_000_000,
        evaluated_at=NOW,
        group_status=group_status("prod", "billing", Status.ERR, (900, 0)),
        time_lags=LAGS,
        explanation=WHY,
        retention=RISKS,
    )


# --- one description: the Structs and the schemas agree --------------------------------------------------------

STATUS_SCHEMA = status_event.schema()
LAG_SCHEMA = lag_threshold_event.schema()
PAIRS = [
    (StatusEvent, STATUS_SCHEMA),
    (EventPartition, STATUS_SCHEMA["$defs"]["partition"]),
    (VelocityFields, STATUS_SCHEMA["$defs"]["velocity"]),
    (RetentionFields, STATUS_SCHEMA["$defs"]["retention"]),
    (ExplanationFields, STATUS_SCHEMA["$defs"]["explanation"]),
    (LagThresholdEvent, LAG_SCHEMA),
    (LagPartition, LAG_SCHEMA["properties"]["partitions"]["items"]),
    (ExplanationFields, LAG_SCHEMA["properties"]["explanation"]),
]


def _arms(tp) -> tuple:
    return get_args(tp) if get_origin(tp) in (Union, types.UnionType) else (tp,)


def fields(cls) -> tuple[msgspec.structs.FieldInfo, ...]:
    """Its fields, each with its annotation resolved (`type`) and its default (NODEFAULT: none)."""
    return msgspec.structs.fields(cls)


def _nullable(prop: dict, schema: dict) -> bool:
    prop = schema["$defs"][prop["$ref"].rsplit("/", 1)[1]] if "$ref" in prop else prop
    kinds = prop.get("type", [])
    return (
        "null" in (kinds if isinstance(kinds, list) else [kinds])
        or None in prop.get("enum", [])
        or any(arm.get("type") == "null" for arm in prop.get("oneOf", []))
    )


@pytest.mark.parametrize(("cls", "doc"), PAIRS, ids=lambda v: getattr(v, "__name__", ""))
def test_every_schema_property_is_a_field_and_every_field_a_schema_property(cls, doc):
    assert doc.get("additionalProperties") is False  # so a decode refuses unknown fields too
    assert {f.name for f in fields(cls)} == set(doc["properties"])


@pytest.mark.parametrize(("cls", "doc"), PAIRS, ids=lambda v: getattr(v, "__name__", ""))
def test_a_required_field_can_never_be_left_out_and_is_null_only_where_the_schema_says(cls, doc):
    assert cls.__struct_config__.omit_defaults  # a field at its default is left out: so a required one has none
    for f in fields(cls):
        arms = _arms(f.type)
        nullable = _nullable(doc["properties"][f.name], STATUS_SCHEMA if cls is not LagThresholdEvent else LAG_SCHEMA)
        if f.name in doc["required"]:
            assert UnsetType not in arms and f.required and f.default is msgspec.NODEFAULT, f.name
            assert (type(None) in arms) == nullable, f.name
        else:  # left out: None when it is never null, UNSET when it may be
            assert f.default is (UNSET if nullable else None), f.name


@pytest.mark.parametrize(("cls", "doc"), PAIRS, ids=lambda v: getattr(v, "__name__", ""))
def test_the_fields_with_fixed_values_allow_exactly_the_schemas_values(cls, doc):
    root = STATUS_SCHEMA if cls is not LagThresholdEvent else LAG_SCHEMA
    for f in fields(cls):
        prop = doc["properties"][f.name]
        prop = root["$defs"][prop["$ref"].rsplit("/", 1)[1]] if "$ref" in prop else prop
        values = [a for arm in _arms(f.type) if get_origin(arm) is Literal for a in get_args(arm)]
        enums = [arm for arm in _arms(f.type) if isinstance(arm, type) and issubclass(arm, Enum)]
        values += [m.value for arm in enums for m in arm]
        if "const" in prop:
            assert values == [prop["const"]], f.name
        elif values:
            assert sorted(values) == sorted(v for v in prop["enum"] if v is not None), f.name


@pytest.mark.parametrize(("cls", "doc"), [(StatusEvent, STATUS_SCHEMA), (LagThresholdEvent, LAG_SCHEMA)])
def test_the_fields_a_partial_record_must_carry_are_fields_the_schema_requires(cls, doc):
    assert cls.KEY_FIELDS.issubset(doc["required"])
    whole = known_status_event() if cls is StatusEvent else known_lag_event()
    for name in sorted(cls.KEY_FIELDS):
        with pytest.raises(EventDecodeError, match=f"^{name}: missing$"):
            read_partial(cls, json.dumps({k: v for k, v in whole.as_dict().items() if k != name}))


def test_events_are_frozen_and_slotted_and_refuse_unknown_fields():
    event = known_status_event()
    with pytest.raises(AttributeError, match="immutable"):
        event.status = "OK"  # type: ignore[misc]
    for cls, _ in PAIRS:
        assert issubclass(cls, msgspec.Struct) and hasattr(cls, "__slots__") and not hasattr(event, "__dict__")
        assert cls.__struct_config__.frozen and cls.__struct_config__.forbid_unknown_fields


# --- the bytes on the wire ---------------------------------------------------------------------------------------


def test_a_status_event_encodes_to_the_bytes_the_evaluator_published_before_it_was_typed():
    assert known_status_event().encode() == (DATA / "status_event_v1.json").read_bytes()


def test_a_lag_threshold_event_encodes_to_the_bytes_the_evaluator_published_before_it_was_typed():
    assert known_lag_event().encode() == (DATA / "lag_threshold_event_v1.json").read_bytes()


def test_a_record_decodes_to_the_event_it_was_and_encodes_back_to_the_same_bytes():
    for cls, path in ((StatusEvent, "status_event_v1.json"), (LagThresholdEvent, "lag_threshold_event_v1.json")):
        raw = (DATA / path).read_bytes()
        event = cls.decode(raw)
        assert event.encode() == raw and cls.decode(raw.decode()) == event
        assert event.as_dict() == json.loads(raw)


def test_the_typed_event_reads_as_the_json_says():
    event = StatusEvent.decode((DATA / "status_event_v1.json").read_bytes())
    assert (event.status, event.previous_status, event.incident_id, event.totallag) == ("ERR", "OK", "inc-1", 900)
    assert event.partitions[0].velocity == VelocityFields.of(SPEEDS[("orders", 0)])
    assert event.partitions[0].lag_seconds == 420.5 and event.topics == ["orders"]
    lag = LagThresholdEvent.decode((DATA / "lag_threshold_event_v1.json").read_bytes())
    assert lag.which is Alert.DATA_LOSS_RISK and lag.reason is Reason.RETENTION and lag.above is True
    assert lag.partitions[0].retention_risk_seconds == 120.0 and lag.retention_risk_seconds == 120.0


def test_a_field_left_out_stays_left_out_and_a_null_stays_null():
    event = replace(known_status_event(), max_lag_seconds=UNSET, max_lag_seconds_lower_bound=None, velocity=None)
    doc = event.as_dict()
    assert "max_lag_seconds" not in doc and "max_lag_seconds_lower_bound" not in doc and "velocity" not in doc
    assert StatusEvent.decode(event.encode()) == event
    nulled = replace(event, max_lag_seconds=None)
    assert nulled.as_dict()["max_lag_seconds"] is None and StatusEvent.decode(nulled.encode()) == nulled
    lag = replace(known_lag_event(), alert=None)  # events written before there were other alerts
    assert "alert" not in lag.as_dict() and LagThresholdEvent.decode(lag.encode()).which is Alert.LAG_SECONDS


def test_the_bytes_are_the_standard_librarys_json_so_text_and_floats_are_spelled_as_ever():
    """msgspec's own writer would write these UTF-8 and 1e16 (not 1e+16): the codec only makes the JSON object."""
    event = replace(known_lag_event(), group="é☃ \u2028 日本", threshold_seconds=1e16, max_lag_seconds=2.5e-7)
    raw = event.encode()
    assert raw == json.dumps(event.as_dict(), separators=(",", ":"), sort_keys=True).encode()
    assert b'"group":"\\u00e9\\u2603 \\u2028 \\u65e5\\u672c"' in raw and b'"threshold_seconds":1e+16' in raw
    assert b'"max_lag_seconds":2.5e-07' in raw and LagThresholdEvent.decode(raw) == event


def test_a_threshold_written_as_an_integer_keeps_its_bytes():
    raw = json.dumps({**known_lag_event().as_dict(), "threshold_seconds": 300}, separators=(",", ":"), sort_keys=True)
    assert LagThresholdEvent.decode(raw).encode() == raw.encode()


# --- random events: valid by the schema, and back from their bytes ---------------------------------------------

STATUSES = st.sampled_from([Status.OK, Status.WARN, Status.ERR, Status.NOTFOUND])
LAG_LISTS = st.lists(st.integers(0, 10**9), min_size=1, max_size=4)
SECONDS = st.floats(0, 1e7, allow_nan=False)
TIME_LAGS = st.one_of(st.none(), st.builds(TimeLag, SECONDS, st.booleans()))
RATES = st.one_of(st.none(), SECONDS)
VELOCITIES = st.builds(Velocity, RATES, RATES, st.integers(0, 10**6), st.sampled_from(list(CatchUp)), RATES)
RISKS_ = st.builds(RetentionRisk, RATES, st.integers(0, 10**6), st.sampled_from([None, "log-start", "retention.ms"]))
WHYS = st.one_of(st.none(), st.builds(Explanation, st.sampled_from(["stalled", "rewound", "unknown"]), st.text()))


def _per_partition(values, count: int):
    return st.dictionaries(st.sampled_from([("orders", i) for i in range(count)]), values)


@st.composite
def status_events(draw) -> StatusEvent:
    return status_event.build_event(**draw(status_event_inputs()))


@st.composite
def status_event_inputs(draw) -> dict:
    """`build_event`'s arguments."""
    status, lags = draw(STATUSES), draw(LAG_LISTS)
    gone = status == Status.NOTFOUND
    previous = draw(STATUSES.filter(lambda s: s != status))
    return dict(
        cluster=draw(st.text(min_size=1)),
        group=draw(st.text()),
        seq=draw(st.integers(1, 10**6)),
        previous=previous,
        group_status=None if gone else group_status("c", "g", status, tuple(lags)),
        incident=draw(st.sampled_from([Incident(None, None), Incident("inc-1", NOW)])),
        evaluated_at=NOW,
        replayed=draw(st.booleans()),
        time_lags=draw(st.one_of(st.none(), _per_partition(TIME_LAGS, len(lags)))),
        velocities=draw(st.one_of(st.none(), _per_partition(VELOCITIES, len(lags)))),
        explanation=draw(WHYS),
        retention=draw(st.one_of(st.none(), _per_partition(RISKS_, len(lags)))),
    )


@st.composite
def lag_events(draw) -> LagThresholdEvent:
    status, lags = draw(STATUSES), draw(LAG_LISTS)
    alert = draw(st.sampled_from(list(Alert)))
    above = draw(st.booleans())
    threshold = 0.0 if alert == Alert.MESSAGES_SKIPPED else draw(SECONDS)
    return lag_threshold_event.build_event(
        cluster=draw(st.text(min_size=1)),
        group=draw(st.text()),
        crossing=Crossing(threshold, above, draw(st.sampled_from(list(Reason))), alert),
        seq=draw(st.integers(1, 10**6)) * 2 - (1 if above else 0),
        incident_started_at=NOW - 1000,
        evaluated_at=NOW,
        group_status=None if status == Status.NOTFOUND else group_status("c", "g", status, tuple(lags)),
        time_lags=draw(_per_partition(TIME_LAGS, len(lags))),
        explanation=draw(WHYS),
        retention=draw(st.one_of(st.none(), _per_partition(RISKS_, len(lags)))),
    )


@pytest.mark.parametrize(
    ("cls", "events", "doc_schema"),
    [(StatusEvent, status_events(), STATUS_SCHEMA), (LagThresholdEvent, lag_events(), LAG_SCHEMA)],
    ids=["status", "lag-threshold"],
)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_any_event_encodes_to_json_its_schema_accepts_and_decodes_back_to_itself(cls, events, doc_schema, data):
    event = data.draw(events)
    doc = json.loads(event.encode())
    jsonschema.validate(doc, doc_schema)
    assert cls.decode(event.encode()) == event and event.as_dict() == doc


# --- what is not an event ----------------------------------------------------------------------------------------

GOOD = json.loads((DATA / "status_event_v1.json").read_bytes())


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (b"\xff", "not JSON"),
        (b"[1, 2]", "the event: expected `object`, got `array`"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "seq"}), "seq: missing"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "replayed"}), "replayed: missing"),  # required: no default
        (json.dumps({**GOOD, "seq": "2"}), "seq: expected `int`, got `str`"),
        (json.dumps({**GOOD, "seq": True}), "seq: expected `int`, got `bool`"),
        (json.dumps({**GOOD, "status": "STOP"}), "status: invalid enum value 'STOP'"),
        (json.dumps({**GOOD, "schema_version": 2}), "schema_version: invalid enum value 2"),
        (json.dumps({**GOOD, "incident_id": 5}), "incident_id: expected `str | null`, got `int`"),
        (json.dumps({**GOOD, "surprise": 1}), "surprise: unknown field"),
        (json.dumps({**GOOD, "partitions": {}}), "partitions: expected `array`, got `object`"),
        (
            json.dumps({**GOOD, "partitions": [{**GOOD["partitions"][0], "partition": 0.5}]}),
            "partitions[0].partition: expected `int`, got `float`",
        ),
        (json.dumps({**GOOD, "maxlag": {"topic": "t"}}), "maxlag.partition: missing"),
    ],
)
def test_a_record_that_is_not_a_status_event_is_refused_naming_the_field(record, message):
    with pytest.raises(EventDecodeError, match=re.escape(message)):
        StatusEvent.decode(record)


def test_a_lag_threshold_record_with_an_unknown_alert_or_reason_is_refused():
    good = known_lag_event().as_dict()
    with pytest.raises(EventDecodeError, match="alert: invalid enum value 'other'"):
        LagThresholdEvent.decode(json.dumps({**good, "alert": "other"}))
    with pytest.raises(EventDecodeError, match="above: expected `bool`, got `str`"):
        LagThresholdEvent.decode(json.dumps({**good, "above": "yes"}))
    with pytest.raises(EventDecodeError, match="kind: invalid enum value 'status'"):
        LagThresholdEvent.decode(json.dumps({**good, "kind": "status"}))


def test_the_notifier_takes_records_with_the_fields_it_reads_and_ignores_fields_it_does_not_know():
    """Its boundary always took such records (events.py); a newer producer's field does not stop it."""
    minimal = {k: GOOD[k] for k in ("event_id", "cluster", "group", "status", "previous_status", "incident_id")}
    event = parse_status_event(json.dumps({**minimal, "evaluated_at": NOW, "from_the_future": [1]}))
    assert event is not None and event.status == "ERR" and event.partitions == () and event.totallag == 0
    assert parse_status_event(json.dumps(minimal)) is None  # no evaluated_at: not one
    assert parse_status_event(json.dumps({**GOOD, "totallag": "lots"})) is None  # a field of the wrong type
    lag = from_document(LagThresholdEvent, {"kind": "lag_threshold", "incident_id": "lag-1"}, partial=True)
    assert lag.which is Alert.LAG_SECONDS and lag.reason is Reason.LAG  # what an older event without them meant
    assert lag.status == "NOTFOUND" and lag.threshold_seconds == 0.0  # a missing one: the first declared, or empty
    assert parse_lag_event(known_lag_event().encode()) == known_lag_event()


def test_an_incident_state_kept_with_an_event_that_no_longer_decodes_is_read_by_what_the_rules_need():
    """A state an earlier notifier wrote from a record it took then (a field of the wrong type) must not stall
    the repeat timer: its event keeps the fields the rules, holds and silences read."""
    kept = {**GOOD, "totallag": "lots", "partitions": "none"}
    state = IncidentState.from_json({"incident_id": "inc-1", "status": "ERR", "notified_at": NOW, "event": kept})
    assert state.event.event_id == GOOD["event_id"] and state.event.incident_id == "inc-1"
    assert (state.event.status, state.event.cluster, state.event.totallag) == ("ERR", "prod", 0)
    lag = {**known_lag_event().as_dict(), "evaluated_at": "noon"}
    lag_state = IncidentState.from_json({"incident_id": "x", "status": "ABOVE", "notified_at": NOW, "event": lag})
    assert isinstance(lag_state.event, LagThresholdEvent) and lag_state.event.which is Alert.DATA_LOSS_RISK


# --- the fast paths beside their references ------------------------------------------------------------------------

# every spelling the two writers part on: exponents both ways, small decimals, DEL, non-ASCII and control characters
ANY_FLOATS = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(1e-9, 1e-3),
    st.floats(1e15, 1e18),
    st.sampled_from([0.0, -0.0, 1e-05, 0.0001, 1e16, 9.999999999999998e15]),
)
ANY_TEXT = st.one_of(st.text(), st.text(alphabet='0123456789e.-:,[]}\x7f\x00\n"\\é\u2028', max_size=12))


@settings(max_examples=400, deadline=None)
@given(event=status_events(), complete=ANY_FLOATS, lag=ANY_FLOATS, group=ANY_TEXT, text=ANY_TEXT)
def test_a_status_event_written_by_msgspec_where_it_can_has_the_references_bytes(event, complete, lag, group, text):
    event = replace(event, complete=complete, max_lag_seconds=lag, group=group)
    if event.explanation is not None:
        event = replace(event, explanation=replace(event.explanation, text=text))
    assert event.encode() == event_codec.encode(event)


@settings(max_examples=150, deadline=None)
@given(event=lag_events(), threshold=ANY_FLOATS, group=ANY_TEXT)
def test_a_lag_threshold_event_written_by_msgspec_where_it_can_has_the_references_bytes(event, threshold, group):
    event = replace(event, threshold_seconds=threshold, group=group)
    assert event.encode() == event_codec.encode(event)


def test_a_plain_event_is_written_by_msgspec_and_one_it_would_spell_apart_by_the_reference():
    plain = known_status_event()
    assert plain.encode() == msgspec.json.encode(plain, order="sorted")
    for event in (
        replace(plain, complete=1e-05),
        replace(plain, totallag=10**17, complete=1e16),
        replace(plain, group="é"),
    ):
        assert event.encode() == event_codec.encode(event) != msgspec.json.encode(event, order="sorted")


@settings(max_examples=200, deadline=None)
@given(velocity=VELOCITIES, risk=RISKS_, why=WHYS.filter(lambda why: why is not None))
def test_an_event_part_made_from_its_fields_is_the_part_its_json_converts_to(velocity, risk, why):
    for cls, value in ((VelocityFields, velocity), (RetentionFields, risk), (ExplanationFields, why)):
        made = cls.of(value)
        assert made == from_document(cls, value.to_json()) and event_codec.encode(made) == event_codec.encode(
            from_document(cls, value.to_json())
        )


@settings(max_examples=200, deadline=None)
@given(inputs=status_event_inputs())
def test_an_event_given_its_groups_velocity_and_retention_is_the_one_that_computes_them(inputs):
    velocities, risks = inputs["velocities"], inputs["retention"]
    given = dict(inputs)
    if velocities is not None:
        given["group_velocity"] = group_velocity(velocities.values())
    if risks is not None:
        given["group_retention"] = group_risk(risks.values())
    assert status_event.build_event(**given) == status_event.build_event(**inputs)
    other = Velocity(1.5, 2.5, 7, CatchUp.NEVER, None)  # what it is given is what it carries (not computed again)
    event = status_event.build_event(**given | {"group_velocity": other})
    assert event.velocity == (
        None if velocities is None or inputs["group_status"] is None else VelocityFields.of(other)
    )

"""Burrow's template helpers and names in lagwatch's sandboxed templates, rendered by the template worker as the
notifier renders them: Go's time layouts, Go's integer arithmetic, Burrow's partition counts and JSON."""

import json

import pytest

from lagwatch.shared.notifications.templating import template_worker
from lagwatch.shared.notifications.templating.templates import TemplateProblem, context
from tests.services.notifier.test_notifier_support import Timeline

GO_PLAYGROUND_MS = 1_257_894_000_000  # 2009-11-10 23:00:00 UTC, the time Go's examples print


def render(source: str, event=None, **extra) -> str:
    if event is None:
        t = Timeline("billing", start_ms=GO_PLAYGROUND_MS - 120_000)
        t.to("OK")
        event = t.to("ERR", (7, 0, 3))
    ctx = context(event, kind="open", subscription_id="s", notification_id="n", attempt=1, extras={"app": "burrow"},
                  dashboard_url="")  # fmt: skip
    return template_worker.WORKERS.render(source, {**ctx, **extra})


@pytest.mark.parametrize(
    ("layout", "ms", "expected"),
    [
        ("Mon Jan _2 15:04:05 2006", 0, "Tue Nov 10 23:00:00 2009"),  # time.ANSIC
        ("Mon, 02 Jan 2006 15:04:05 MST", 0, "Tue, 10 Nov 2009 23:00:00 UTC"),  # time.RFC1123
        ("2006-01-02T15:04:05Z07:00", 0, "2009-11-10T23:00:00Z"),  # time.RFC3339
        ("2006-01-02T15:04:05.999999999Z07:00", 0, "2009-11-10T23:00:00Z"),  # RFC3339Nano: a zero fraction goes
        ("2006-01-02T15:04:05.999999999Z07:00", 120, "2009-11-10T23:00:00.12Z"),
        ("Jan _2 15:04:05.000", 5, "Nov 10 23:00:00.005"),  # time.StampMilli
        ("3:04PM", 0, "11:00PM"),  # time.Kitchen
        ("02 Jan 06 15:04 -0700", 0, "10 Nov 09 23:00 +0000"),  # time.RFC822Z
        ("Monday, January 2 (002) _2006", 0, "Tuesday, November 10 (314) _2009"),
        ("Janet Monk Mondays", 0, "Janet Monk Tuesdays"),  # "Jan", "Mon" before a lower-case letter are text
    ],
)
def test_formattimestamp_takes_gos_layouts(layout, ms, expected):
    assert render("{{ formattimestamp(ts, layout) }}", ts=GO_PLAYGROUND_MS + ms, layout=layout) == expected
    assert render("{{ ts | formattimestamp(layout) }}", ts=GO_PLAYGROUND_MS + ms, layout=layout) == expected


def test_arithmetic_is_gos_64_bit_integer_arithmetic():
    assert render("{{ add(2, 3) }} {{ minus(2, 3) }} {{ multiply(-4, 3) }} {{ divide(7, 2) }} {{ divide(-7, 2) }}") == (
        "5 -1 -12 3 -3"
    )
    assert render("{{ multiply(4611686018427387904, 4) }} {{ add(9223372036854775807, 1) }}") == (
        "0 -9223372036854775808"  # wraps as Go's int does, so no result is large
    )
    with pytest.raises(TemplateProblem, match="divide by zero"):
        render("{{ divide(1, 0) }}")
    with pytest.raises(TemplateProblem, match="expected an integer"):
        render("{{ add('1', 2) }}")


def test_partition_helpers_count_and_group_like_burrows():
    assert json.loads(render("{{ partitioncounts(event.partitions) | jsonencoder }}")) == {
        "warn": 0, "stop": 0, "stall": 2, "rewind": 0, "unknown": 0
    }  # fmt: skip
    assert render("{{ Result.Partitions | topicsbystatus | jsonencoder }}") == '{"STALL":["orders"]}'
    assert render("{{ maxlag(Result.Maxlag) }} {{ event.maxlag | maxlag }} {{ maxlag(none) }}") == "7 7 0"


def test_burrows_names_hold_the_event_with_gos_field_names():
    out = render(
        "{{ Cluster }} {{ Group }} {{ ID == incident.id }} {{ Start }} {{ Extras.app }} "
        "{{ Result.Status }} {{ Result.TotalLag }} {{ Result.TotalPartitions }} {{ Result.Maxlag.Topic }}"
    )
    assert out == f"local billing True {GO_PLAYGROUND_MS} burrow ERR 10 3 orders"


def test_jsonencoder_writes_burrows_json():
    partitions = json.loads(render("{{ Result.Partitions | jsonencoder }}"))
    assert partitions[0] == {"topic": "orders", "partition": 0, "owner": "/10.0.0.1", "client_id": "billing-0",
                             "status": "STALL", "start": {"offset": 1000}, "end": {"offset": 2000},
                             "current_lag": 7}  # fmt: skip
    assert render('{{ jsonencoder({"b": "<&>", "a": 1.0}) }}') == '{"a":1,"b":"\\u003c\\u0026\\u003e"}'


@pytest.mark.parametrize(
    "hostile",
    ["{{ Result.__class__ }}", "{{ Result.go_json.__globals__ }}", "{{ jsonencoder.__globals__ }}",
     "{{ Result.Partitions.append(1) }}", "{{ Result.update({}) }}"],
)  # fmt: skip
def test_the_helpers_open_no_way_out_of_the_sandbox(hostile):
    with pytest.raises(TemplateProblem):
        render(hostile)

"""Templates are rendered in worker processes with a time, memory and output budget and bounded arithmetic: a
hostile template fails with a clear TemplateProblem, the worker is replaced, and the next template renders. The
fuzz tests render arbitrary templates (random pieces, and well-formed ones that loop, multiply, repeat and recurse):
each one renders within its output budget or fails with a TemplateProblem, never anything else, and each call
ends."""

import time

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lagwatch.shared.notifications.templating.template_worker import OverBudget, TemplateWorkers
from lagwatch.shared.notifications.templating.templates import TemplateProblem

NESTED_LOOPS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"


@pytest.fixture(scope="module")
def workers():
    pool = TemplateWorkers(size=1, timeout_s=1.0, memory_bytes=128 * 2**20)
    yield pool
    pool.close()


def test_a_template_that_runs_too_long_is_cut_off_and_the_next_one_renders(workers):
    with pytest.raises(TemplateProblem, match=r"time budget \(1s\)"):
        workers.render(NESTED_LOOPS, {})
    assert workers.render("{{ event.group }}", {"event": {"group": "billing"}}) == "billing"


@pytest.mark.parametrize(
    "template",
    [
        '{{ "x"|center(400000000) }}',  # folded while compiling: the compile itself is over budget
        '{% set n = 400000000 %}{{ "x"|center(n) }}',  # at render time
        "{{ range(100000)|list|map('string')|join('x'*100) }}",
    ],
)
def test_a_template_that_needs_too_much_memory_fails_and_the_worker_is_replaced(workers, template):
    with pytest.raises(TemplateProblem, match=r"memory budget|output is over|over 1000000 items"):
        workers.render(template, {})
    assert workers.render("{{ 1 + 1 }}", {}) == "2"


@pytest.mark.parametrize(
    ("template", "budget"),
    [(NESTED_LOOPS, "time budget"), ('{% set n = 400000000 %}{{ "x"|center(n) }}', "memory budget")],
)
def test_a_template_over_its_budget_is_not_rendered_again_for_a_while(template, budget):
    """Each over-budget render costs a worker's whole budget and a restart: a hostile subscription repeating every
    second would keep the shared workers busy. Once over, the same template fails at once until its quarantine
    ends; others render meanwhile; cheap failures are not quarantined."""
    pool = TemplateWorkers(size=1, timeout_s=0.5, memory_bytes=128 * 2**20, quarantine_s=1.5)
    try:
        with pytest.raises(OverBudget, match=budget):
            pool.render(template, {})
        with pytest.raises(OverBudget, match="not rendered again"):
            pool.render(template, {})
        assert pool.render("{{ 1 + 1 }}", {}) == "2"
        for _ in range(2):
            with pytest.raises(TemplateProblem, match="over 4096 bits"):
                pool.render("{{ 2**100000 }}", {})
        time.sleep(1.6)
        with pytest.raises(OverBudget, match=budget):  # tried again once its quarantine is over
            pool.render(template, {})
    finally:
        pool.close()


def test_output_is_counted_while_it_is_produced(workers):
    """Over the output budget first, then a loop that would run for hours: the budget stops it, not the clock."""
    template = '{{ "x" * 2000 }}' + NESTED_LOOPS
    with pytest.raises(TemplateProblem, match="output is over 1000 characters"):
        workers.render(template, {}, max_chars=1000)


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        ("{{ 2**100000 }}", "2 \\*\\* 100000 is over 4096 bits"),
        ("{{ 3**6000000 }}", "3 \\*\\* 6000000 is over 4096 bits"),
        ("{% set n = 10**1000 %}{{ n * n * n * n * n }}", "product is over 4096 bits"),
        ("{{ 'ab' * 10**7 }}", "repeating a sequence"),
        ("{{ [1, 2] * 10**7 }}", "repeating a sequence"),
    ],
)
def test_huge_arithmetic_is_refused_before_it_is_computed(workers, template, problem):
    workers.check(template)  # compiles: intercepted operators are not evaluated while compiling
    with pytest.raises(TemplateProblem, match=problem):
        workers.render(template, {})


def test_ordinary_arithmetic_still_works(workers):
    assert workers.render("{{ 2**64 }} {{ 3 * 4 }} {{ 'ab' * 2 }} {{ 2.5 ** 2 }}", {}) == (
        "18446744073709551616 12 abab 6.25"
    )


JINJA_BITS = st.sampled_from(
    [
        "{{ ",
        " }}",
        "{% for i in range(99999) %}",
        "{% endfor %}",
        "{% if x %}",
        "{% endif %}",
        "{% set x = ",
        " %}",
        "**",
        "*",
        "9999",
        "'ab'",
        "|join",
        "|center(",
        ")",
        "event",
        ".group",
        "x",
        "[1,2]",
        "~",
        "+",
        "loop.index",
        "range(",
        "|list",
        "|tojson",
        "{{ event.group }}",
    ]
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(JINJA_BITS | st.text(max_size=5), max_size=14).map("".join))
def test_any_template_renders_or_fails_with_a_template_problem(workers, template):
    try:
        text = workers.render(template, {"event": {"group": "billing"}}, max_chars=10_000)
    except TemplateProblem:
        return
    assert isinstance(text, str) and len(text) <= 10_000


# Well-formed templates that do real work: loops over big ranges nested in each other, big arithmetic, repeated
# sequences, wide filters, recursion. Without the budgets many of them would run for hours or take gigabytes.
NUMBERS = st.integers(0, 2**20) | st.sampled_from([10**5, 10**6, 10**9, 2**64, 10**300]).map(str) | st.just("x")
ATOMS = NUMBERS.map(str) | st.sampled_from(["event.group", "'ab'", "[1, 2]", "x", "range(100000)", "loop.index"])
FILTERS = st.sampled_from(
    ["list", "join", "join('x' * 100)", "string", "length", "tojson", "center(10**9)", "reverse", "sum", "batch(3)"]
)
EXPRESSIONS = st.recursive(
    ATOMS,
    lambda inner: (
        st.builds(lambda a, op, b: f"({a} {op} {b})", inner, st.sampled_from(["*", "**", "+", "~"]), inner)
        | st.builds(lambda a, f: f"({a})|{f}", inner, FILTERS)
    ),
    max_leaves=6,
)
BLOCKS = st.recursive(
    st.builds("{{{{ {} }}}}".format, EXPRESSIONS) | st.text(max_size=3),
    lambda inner: (
        st.builds("{{% for x in range({}) %}}{}{{% endfor %}}".format, NUMBERS, inner)
        | st.builds("{{% set x = {} %}}{}".format, EXPRESSIONS, inner)
        | st.builds("{{% if {} %}}{}{{% endif %}}".format, EXPRESSIONS, inner)
        | st.lists(inner, max_size=3).map("".join)
    ),
    max_leaves=5,
)
RECURSION = "{% macro f(n) %}{{ f(n) }}{{ f(n) }}{% endmacro %}{{ f(1) }}"


@pytest.fixture(scope="module")
def quick_workers():
    pool = TemplateWorkers(size=1, timeout_s=0.5, memory_bytes=128 * 2**20)
    yield pool
    pool.close()


@example(template=NESTED_LOOPS)
@example(template=RECURSION)
@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(template=BLOCKS)
def test_any_well_formed_template_ends_within_its_budget_with_bounded_output(quick_workers, template):
    started = time.monotonic()
    try:
        text = quick_workers.render(template, {"event": {"group": "billing"}}, max_chars=10_000)
    except TemplateProblem:
        text = ""
    # a liveness bound, not a speed check: the budget is 0.5 s (plus a worker's restart); unbounded, many of these
    # would run for hours
    assert time.monotonic() - started < 30
    assert isinstance(text, str) and len(text) <= 10_000

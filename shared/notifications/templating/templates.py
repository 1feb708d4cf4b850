"""Body and URL templates: Jinja2 in its sandbox (`ImmutableSandboxedEnvironment`), with the names and helpers
docs/webhooks.md lists (Burrow's among them: burrow_helpers.py).

Beyond the sandbox's refusals (internals such as `__class__`, calls that mutate data), `**` and `*` refuse results
over `MAX_INT_BITS` bits or `MAX_OUTPUT_CHARS` items (so they are not evaluated while compiling either), and the
output is counted while it is produced. Rendering errors (undefined names included: `StrictUndefined`) fail the
delivery for good. Templates are compiled and rendered only in worker processes, with a time and a memory budget
(template_worker.py).
"""

from __future__ import annotations

import functools
import json
from datetime import UTC, datetime
from typing import Any

from jinja2 import StrictUndefined, Template, TemplateError
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment

from lagwatch.shared.notifications.templating import burrow_helpers
from lagwatch.shared.runtime import clock

MAX_OUTPUT_CHARS = 1_000_000
MAX_INT_BITS = 4096  # about 1200 decimal digits: past any lag, offset or timestamp
COMPILED_CACHE = 256  # templates kept compiled by a worker


class TemplateProblem(ValueError):
    """A template that does not compile or cannot be rendered."""


def format_ts(ms: int | float | None, fmt: str = "%Y-%m-%d %H:%M:%S UTC") -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime(fmt)


def duration(seconds: float | int | None) -> str:
    if seconds is None:
        return ""
    seconds = int(max(0, seconds))
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{v}{unit}" for v, unit in ((days, "d"), (hours, "h"), (minutes, "m")) if v]
    if not parts or (not days and not hours and secs):
        parts.append(f"{secs}s")
    return " ".join(parts)


def partitions_by_status(event: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for p in event.get("partitions") or []:
        out.setdefault(p["status"], []).append(p)
    return out


def worst_partitions(event: dict[str, Any], n: int = 5) -> list[dict[str, Any]]:
    """The partitions worse than OK with the most lag first."""
    return sorted(event.get("partitions") or [], key=lambda p: (-p["current_lag"], p["topic"], p["partition"]))[:n]


def worst_partition(event: dict[str, Any]) -> dict[str, Any] | None:
    maxlag: dict[str, Any] | None = event.get("maxlag")
    if maxlag:
        return maxlag
    worst = worst_partitions(event, 1)
    return worst[0] if worst else None


def worst_partition_lag(event: dict[str, Any]) -> int:
    worst = worst_partition(event)
    return int(worst["current_lag"]) if worst else 0


def _tojson(value: Any, indent: int | None = None) -> str:
    return json.dumps(value, indent=indent, sort_keys=True)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def arithmetic_problem(operator: str, left: Any, right: Any) -> str | None:
    """Why `left <operator> right` must not be computed: its result would be huge (None = fine)."""
    powers = operator == "**" and _is_int(left) and _is_int(right) and right > 0
    if powers and (abs(left).bit_length() - 1) * right > MAX_INT_BITS:  # the result has at least that many bits
        return f"{left} ** {right} is over {MAX_INT_BITS} bits"
    if operator == "*":
        if _is_int(left) and _is_int(right) and left.bit_length() + right.bit_length() > MAX_INT_BITS + 1:
            return f"the product is over {MAX_INT_BITS} bits"
        for seq, n in ((left, right), (right, left)):
            if isinstance(seq, str | list | tuple) and _is_int(n) and len(seq) * n > MAX_OUTPUT_CHARS:
                return f"repeating a sequence over {MAX_OUTPUT_CHARS} items"
    return None


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """The sandbox, with `**` and `*` bounded (intercepted operators are never folded at compile time either)."""

    intercepted_binops = frozenset({"**", "*"})

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        problem = arithmetic_problem(operator, left, right)
        if problem:
            raise SecurityError(problem)
        return super().call_binop(context, operator, left, right)


def environment() -> BoundedSandbox:
    env = BoundedSandbox(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)
    env.filters["tojson"] = _tojson
    env.filters.update(burrow_helpers.HELPERS)  # `{{ Result.Partitions | jsonencoder }}`, as Go's pipelines
    env.globals.update(burrow_helpers.HELPERS)  # `{{ maxlag(Result.Maxlag) }}`, as Go's calls
    helpers = (format_ts, duration, partitions_by_status, worst_partitions, worst_partition, worst_partition_lag)
    env.globals.update({f.__name__: f for f in helpers})
    return env


ENV = environment()


@functools.lru_cache(maxsize=COMPILED_CACHE)
def compile_template(source: str) -> Template:
    """A compiled template; TemplateProblem when it does not compile. (In a template worker only: compiling
    evaluates constant expressions.)"""
    try:
        return ENV.from_string(source)
    except TemplateError as exc:
        raise TemplateProblem(f"template does not compile: {exc}") from None
    except (ArithmeticError, ValueError, TypeError, RecursionError) as exc:  # a constant that cannot be computed
        raise TemplateProblem(f"template does not compile: {type(exc).__name__}: {exc}") from None


def render_limited(source: str, context: dict[str, Any], max_chars: int = MAX_OUTPUT_CHARS) -> str:
    """Render, counting the output as it is produced: TemplateProblem as soon as it is over `max_chars`. (In a
    template worker only.)"""
    template = compile_template(source)
    parts: list[str] = []
    size = 0
    try:
        for chunk in template.generate(**context):
            size += len(chunk)
            if size > max_chars:
                raise TemplateProblem(f"template output is over {max_chars} characters")
            parts.append(chunk)
    except (TemplateProblem, MemoryError):
        raise
    except Exception as exc:  # SecurityError, UndefinedError, a helper given a wrong value, a division by zero, ...
        raise TemplateProblem(f"template failed: {type(exc).__name__}: {exc}") from None
    return "".join(parts)


def incident_duration_s(
    started: int | None, evaluated_at: int, kind: str, reason: str | None, now_ms: int
) -> float | None:
    """How long the incident has lasted (None: not known). A close: until its event (one that is not the group's
    own, `reason`, ends the incident now)."""
    ended = evaluated_at if kind == "close" and not reason else now_ms
    return (ended - started) / 1000 if started else None


def context(
    event: dict[str, Any],
    *,
    kind: str,
    subscription_id: str,
    notification_id: str,
    attempt: int,
    extras: dict[str, str],
    dashboard_url: str,
    now_ms: int | None = None,
    reason: str | None = None,
    receiver: dict[str, str | None] | None = None,
) -> dict[str, Any]:
    now_ms = clock.now_ms() if now_ms is None else now_ms
    started = event.get("incident_started_at")
    duration_s = incident_duration_s(started, event.get("evaluated_at", now_ms), kind, reason, now_ms)
    incident = {"id": event.get("incident_id"), "started_at": started, "duration_s": duration_s}
    return {
        "event": event,
        "incident": incident,
        "notification": {
            "kind": kind,
            "subscription_id": subscription_id,
            "id": notification_id,
            "attempt": attempt,
            "reason": reason,  # why a close is sent when it is not the group's own ("unsubscribed"), else None
            # what a receiver keeping alerts open knows this incident by, for this subscription: `key` (PagerDuty's
            # dedup_key) and `subscription` (Alertmanager's label; None: named by the incident alone), as
            # services/notifier/receiver_identity.py decides
            "receiver": receiver,
        },
        "extras": dict(extras),
        "dashboard_url": dashboard_url,
        **burrow_helpers.burrow_names(event, incident, extras),
    }

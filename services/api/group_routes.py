"""A consumer group named in a request: in its path (Burrow's routes), or in a JSON body (`/api/v1/consumer-groups/...`)
for names no URL can hold.

Kafka takes group names of up to 32,767 bytes; an HTTP request line stops at 8 KB, so Burrow's routes, which carry
the name in the path, cannot reach such a group. `POST .../status`, `.../lag`, `.../detail` and `.../delete` (with
the token, and an optional `topic`) with `{"cluster", "group"}` are served by Burrow's handlers (`burrow_routes.py`)
and answer exactly what Burrow's routes answer. The removal is a POST: HTTP gives a DELETE's body no meaning (RFC
9110 §9.3.5) and some proxies drop it. The body must hold exactly those fields (a misspelt `topic` must not delete
the whole group): any other problem is a 400 listing every one (`"errors": {"group": "..."}`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from aiohttp import web

from lagwatch.services.api.responses import ApiError
from lagwatch.services.api.subscription_routes import read_json_body
from lagwatch.shared.runtime.config import cluster_name_problem

BASE = "/api/v1/consumer-groups"
MAX_GROUP_BYTES = 32_767  # Kafka's: a group id is a protocol STRING, whose length is an int16
MAX_TOPIC_CHARS = 249  # Kafka's


class GroupNamed(NamedTuple):
    cluster: str
    group: str
    topic: str | None = None


async def named_group(request: web.Request, *, topic_allowed: bool = False) -> GroupNamed:
    """The group a POST's JSON body names (a 400 ApiError listing every problem of the body otherwise), or the one
    any other request names in its path."""
    if request.method != "POST":
        info = request.match_info
        return GroupNamed(info["cluster"], info["group"], info.get("topic"))
    doc = await read_json_body(request)
    fields = ("cluster", "group", "topic") if topic_allowed else ("cluster", "group")
    errors = {
        name: f"not a field of this request (its fields: {', '.join(fields)})" for name in sorted(doc.keys() - fields)
    }
    for name, problem in (
        ("cluster", _name_problem(doc, "cluster", cluster_name_problem)),
        ("group", _name_problem(doc, "group", _group_problem)),
        ("topic", _name_problem(doc, "topic", _topic_problem, required=False) if topic_allowed else None),
    ):
        if problem:
            errors[name] = problem
    if errors:
        raise ApiError(400, "invalid request", fields={"errors": errors})
    return GroupNamed(doc["cluster"], doc["group"], doc.get("topic"))


def _name_problem(
    doc: dict[str, Any], field: str, problem_of: Callable[[str], str | None], *, required: bool = True
) -> str | None:
    if field not in doc:
        return "required" if required else None
    value = doc[field]
    if not isinstance(value, str) or not value:
        return "must be a non-empty string"
    return problem_of(value)


def _group_problem(group: str) -> str | None:
    if len(group.encode("utf-8")) > MAX_GROUP_BYTES:
        return f"longer than Kafka allows a group's name ({MAX_GROUP_BYTES:,} bytes in UTF-8)"
    return None


def _topic_problem(topic: str) -> str | None:
    return f"longer than Kafka allows a topic's name ({MAX_TOPIC_CHARS})" if len(topic) > MAX_TOPIC_CHARS else None

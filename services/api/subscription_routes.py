"""Notification subscriptions (`/api/v1/subscriptions`, docs/webhooks.md): create, list, get, update, delete, and send
one a sample incident now through a notifier (`POST .../{id}/test`).

Stored in Redis, where notifiers pick changes up; those of the configuration file are listed too but read-only here
(409). Writes need the token (auth.py); every credential is masked in every answer, and a masked value sent back
unchanged keeps the stored secret unless the subscription moves to another scheme, host or port. Invalid documents
are a 400 listing every problem (`"errors": {"url": "...", ...}`).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from lagwatch.services.api.auth import has_token, requires_token
from lagwatch.services.api.context import CONTEXT
from lagwatch.services.api.responses import ApiError, ok
from lagwatch.shared.notifications import sample_requests
from lagwatch.shared.notifications.sample_requests import NotReported, NotTaken, SampleRequest
from lagwatch.shared.notifications.subscriptions.coverage import Coverage
from lagwatch.shared.notifications.subscriptions.documents import (
    SOURCE_API,
    SOURCE_CONFIG,
    SubscriptionInvalid,
    new_id,
    to_document,
)
from lagwatch.shared.notifications.subscriptions.masking import masked_document, unmask_unchanged, without_credentials
from lagwatch.shared.notifications.subscriptions.store import SubscriptionStore
from lagwatch.shared.notifications.subscriptions.validation import moves, validate_document
from lagwatch.shared.runtime.config import SubscriptionConfig, cluster_name_problem
from lagwatch.shared.statuses.results_store import ResultsStore

routes = web.RouteTableDef()
BASE = "/api/v1/subscriptions"
MAX_BODY_BYTES = 256 * 1024
MAX_SUBSCRIPTIONS = 10_000  # each is matched against every event: a bound on what a token holder can add


def _store(request: web.Request) -> SubscriptionStore:
    return SubscriptionStore(request.app[CONTEXT].redis)


def _from_file(request: web.Request) -> dict[str, SubscriptionConfig]:
    return {s.id: s for s in request.app[CONTEXT].config.subscriptions}


async def read_json_body(request: web.Request) -> dict[str, Any]:
    """The JSON object sent, read to at most MAX_BODY_BYTES whether or not a Content-Length announced it (chunked
    bodies too); JSON is UTF-8 (RFC 8259), whatever charset the Content-Type names."""
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise ApiError(413, f"request body over {MAX_BODY_BYTES} bytes")
    chunks, size = [], 0
    async for chunk in request.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ApiError(413, f"request body over {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
    try:
        doc = json.loads(b"".join(chunks).decode("utf-8"))
    except UnicodeDecodeError:
        raise ApiError(400, "request body is not UTF-8") from None
    except RecursionError:
        raise ApiError(400, "request body is nested too deeply") from None
    except ValueError:
        raise ApiError(400, "request body is not valid JSON") from None
    if not isinstance(doc, dict):
        raise ApiError(400, "request body must be a JSON object")
    try:  # JSON may escape a lone surrogate ("\ud800"): no text, so no regex, header or signature could take it
        json.dumps(doc, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError(400, "request body holds a lone surrogate escape (\\udXXX), not Unicode text") from None
    return doc


async def _validate(request: web.Request, doc: dict, existing: SubscriptionConfig | None = None) -> SubscriptionConfig:
    try:
        return await validate_document(
            doc, allow_private=request.app[CONTEXT].config.notifier.allow_private_targets, existing=existing
        )
    except SubscriptionInvalid as exc:
        raise ApiError(400, "invalid subscription", fields={"errors": exc.errors}) from None


async def _existing(request: web.Request, sub_id: str) -> SubscriptionConfig:
    """The api's subscription: one of the file is a 409, none a 404."""
    config, source = await _any(request, sub_id)
    if source == SOURCE_CONFIG:
        raise ApiError(409, "subscription is defined in the configuration file: change it there")
    return config


async def _written(request: web.Request, config: SubscriptionConfig, done: str) -> web.Response:
    """The answer to a subscription written: itself (masked) and how many of the consumer groups known now (those
    with a status, as `/v3/kafka/{cluster}/consumer` lists them) it covers. A filter that covers none of them is
    said in the message: a typo in a regex would otherwise go unnoticed until an incident nobody hears of."""
    context = request.app[CONTEXT]
    known = {cluster: await ResultsStore(context.redis).groups(cluster) for cluster in await context.clusters()}
    covered = await asyncio.to_thread(Coverage.of(config).count, known)  # 100k names through two regexes
    coverage = {"groups": covered, "known": sum(len(groups) for groups in known.values())}
    message = f"subscription {done}"
    if coverage["known"] and not covered:
        message += (
            f"; it covers none of the {coverage['known']:,} consumer groups known now"
            " (see its clusters, group-allowlist and group-denylist)"
        )
    return ok(request, message, subscription=_shown(request, config, SOURCE_API), coverage=coverage)


def _shown(request: web.Request, config: SubscriptionConfig, source: str) -> dict[str, Any]:
    """Masked; templates shown to token holders only (they write them; a template may hold a credential)."""
    return masked_document(config, source, show_templates=has_token(request))


async def shown_subscriptions(request: web.Request, *, show_templates: bool) -> list[dict[str, Any]]:
    """Every subscription, masked: the file's, then the api's by id (an id in both is the file's)."""
    stored = await _store(request).all()
    file = _from_file(request)
    items = [masked_document(c, SOURCE_CONFIG, show_templates=show_templates) for c in file.values()]
    items += [
        masked_document(c, SOURCE_API, show_templates=show_templates)
        for sub_id, c in sorted(stored.items())
        if sub_id not in file
    ]
    return items


@routes.get(BASE)
async def list_subscriptions(request: web.Request) -> web.Response:
    items = await shown_subscriptions(request, show_templates=has_token(request))
    return ok(request, "subscription list returned", subscriptions=items)


async def _any(request: web.Request, sub_id: str) -> tuple[SubscriptionConfig, str]:
    """The subscription and its source: the file's, else the api's; a 404 when neither has it."""
    if config := _from_file(request).get(sub_id):
        return config, SOURCE_CONFIG
    if config := await _store(request).get(sub_id):
        return config, SOURCE_API
    raise ApiError(404, "subscription not found")


@routes.get(BASE + "/{id}")
async def get_subscription(request: web.Request) -> web.Response:
    config, source = await _any(request, request.match_info["id"])
    return ok(request, "subscription returned", subscription=_shown(request, config, source))


@routes.post(BASE)
@requires_token
async def create_subscription(request: web.Request) -> web.Response:
    doc = await read_json_body(request)
    doc.setdefault("id", new_id())
    config = await _validate(request, doc)
    if await _store(request).count() >= MAX_SUBSCRIPTIONS:
        raise ApiError(409, f"there are {MAX_SUBSCRIPTIONS} subscriptions already: delete some first")
    if config.id in _from_file(request) or not await _store(request).put(config, create=True):
        raise ApiError(409, f"a subscription with id {config.id!r} exists")
    response = await _written(request, config, "created")
    response.set_status(201)
    response.headers["Location"] = f"{BASE}/{config.id}"
    return response


@routes.put(BASE + "/{id}")
@routes.patch(BASE + "/{id}")
@requires_token
async def update_subscription(request: web.Request) -> web.Response:
    """PUT replaces the subscription, PATCH changes the fields given."""
    sub_id, merge = request.match_info["id"], request.method == "PATCH"
    existing = await _existing(request, sub_id)
    doc = await read_json_body(request)
    if doc.get("id", sub_id) != sub_id:
        raise ApiError(400, "invalid subscription", fields={"errors": {"id": "cannot be changed"}})
    moved = moves(unmask_unchanged(doc, existing), existing, merge=merge)
    base = to_document(existing) if merge else {}
    if moved:  # credentials stay with their destination: dropped unless given again, masked values not restored
        base = without_credentials(base)
    doc = {**base, **doc, "id": sub_id}
    config = await _validate(request, doc, None if moved else existing)
    await _store(request).put(config, create=False)
    return await _written(request, config, "updated")


@routes.delete(BASE + "/{id}")
@requires_token
async def delete_subscription(request: web.Request) -> web.Response:
    sub_id = request.match_info["id"]
    if sub_id in _from_file(request):
        raise ApiError(409, "subscription is defined in the configuration file: change it there")
    if not await _store(request).delete(sub_id):  # (one that can no longer be read is deleted too)
        raise ApiError(404, "subscription not found")
    return ok(request, "subscription deleted")


@routes.post(BASE + "/{id}/test")
@requires_token
async def test_subscription(request: web.Request) -> web.Response:
    """A sample incident's open (and, with `send-close`, close) sent to the subscription now by a notifier, as
    `lagwatch notify test` sends it (`?sample=lag`, `retention`: those alerts'): 200 when every receiver took it,
    502 with the report when one did not, 504 when no notifier took the request or reported in time."""
    sub_id, cluster = request.match_info["id"], request.query.get("cluster")
    sample = request.query.get("sample", sample_requests.STATUS)
    if cluster is not None and (problem := cluster_name_problem(cluster)):
        raise ApiError(400, f"cluster: {problem}")
    if sample not in sample_requests.SAMPLES:
        raise ApiError(400, f"sample: {sample[:100]!r} is not one of {', '.join(sample_requests.SAMPLES)}")
    config, _ = await _any(request, sub_id)
    lacking = sample_requests.missing_threshold(sample, config.lag_seconds_threshold, config.retention_risk_threshold)
    if lacking:
        raise ApiError(400, f"sample: the subscription {lacking}")
    context = request.app[CONTEXT]
    if await sample_requests.queued(context.redis) >= sample_requests.MAX_QUEUED:
        raise ApiError(429, "too many samples waiting for a notifier: try again later")
    # an open and a close, each within its timeout; and this answer within the api's own request timeout
    each_s = config.timeout or context.config.notifier.request_timeout
    sends_within_s = max(1.0, min(2 * each_s + 2, context.config.api.request_timeout - sample_requests.PICKUP_S - 1))
    try:
        report = await sample_requests.ask(context.redis, SampleRequest.new(sub_id, cluster, sample), sends_within_s)
    except (NotTaken, NotReported) as exc:
        raise ApiError(504, str(exc)) from None
    if "error" in report:  # the notifier's configuration file differs from the api's
        raise ApiError(409, f"the notifier refused: {report['error']} (is its configuration the api's?)")
    if not all(sent["ok"] for sent in report["sent"]):
        raise ApiError(502, "the receiver did not take the sample", fields=report)
    return ok(request, "sample sent", **report)

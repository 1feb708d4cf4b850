"""Silences (maintenance windows, `/api/v1/silences`): create (token), list (`?state=active|pending|expired`), get,
and end now (DELETE, token: it stays listed, expired, for a week). Stored in Redis where notifiers read them
(shared/notifications/subscriptions/silences.py): a silenced incident notifies nothing while the silence holds.
"""

from __future__ import annotations

import time

from aiohttp import web

from lagwatch.services.api.auth import requires_token
from lagwatch.services.api.context import CONTEXT
from lagwatch.services.api.responses import ApiError, ok
from lagwatch.services.api.subscription_routes import read_json_body
from lagwatch.shared.notifications.subscriptions.silences import MAX_SILENCES, SilenceInvalid, SilenceStore, parse_new

routes = web.RouteTableDef()
BASE = "/api/v1/silences"
STATES = ("pending", "active", "expired")


def _store(request: web.Request) -> SilenceStore:
    return SilenceStore(request.app[CONTEXT].redis)


@routes.get(BASE)
async def list_silences(request: web.Request) -> web.Response:
    wanted = request.query.get("state")
    if wanted is not None and wanted not in STATES:
        raise ApiError(400, f"state must be one of {', '.join(STATES)}")
    now = time.time()
    items = [s.to_json(now) for s in await _store(request).all()]
    if wanted:
        items = [s for s in items if s["state"] == wanted]
    return ok(request, "silence list returned", silences=items)


@routes.get(BASE + "/{id}")
async def get_silence(request: web.Request) -> web.Response:
    silence = await _store(request).get(request.match_info["id"])
    if silence is None:
        raise ApiError(404, "silence not found")
    return ok(request, "silence returned", silence=silence.to_json(time.time()))


@routes.post(BASE)
@requires_token
async def create_silence(request: web.Request) -> web.Response:
    doc = await read_json_body(request)
    now = time.time()
    try:
        silence = parse_new(doc, now)
    except SilenceInvalid as exc:
        raise ApiError(400, "invalid silence", fields={"errors": exc.errors}) from None
    store = _store(request)
    if await store.count_not_ended(now) >= MAX_SILENCES:
        raise ApiError(409, f"there are {MAX_SILENCES} silences pending or active already: end some first")
    await store.put(silence, now)
    response = ok(request, "silence created", http_status=201, silence=silence.to_json(now))
    response.headers["Location"] = f"{BASE}/{silence.id}"
    return response


@routes.delete(BASE + "/{id}")
@requires_token
async def end_silence(request: web.Request) -> web.Response:
    now = time.time()
    silence = await _store(request).end(request.match_info["id"], now)
    if silence is None:
        raise ApiError(404, "silence not found")
    return ok(request, "silence ended", silence=silence.to_json(now))

"""Burrow's configuration routes (`/v3/config...`) and its log level (`/v3/admin/loglevel`), in Burrow's shapes, from
lagwatch's configuration, for scripts and dashboards written against Burrow.

Each list names what stands in for a Burrow module: storage and evaluator `default`, a cluster and a consumer per
configured cluster, a notifier per subscription. Options lagwatch has no counterpart for are Burrow's zero values.
Nothing secret is shown. Setting the log level (this process's) needs the token (Burrow leaves it open).
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from lagwatch.services.api.auth import requires_token
from lagwatch.services.api.burrow_routes import client_profile, cluster_detail
from lagwatch.services.api.context import CONTEXT
from lagwatch.services.api.paths import named
from lagwatch.services.api.responses import ApiError, ok
from lagwatch.services.api.subscription_routes import read_json_body, shown_subscriptions

routes = web.RouteTableDef()
BURROW_THRESHOLDS = {"OK": 1, "WARN": 2, "ERR": 3}  # Burrow's status numbers
LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}


@routes.get("/v3/config")
async def main_config(request: web.Request) -> web.Response:
    api = request.app[CONTEXT].config.api
    tls = "default" if api.tls_cert_file else ""
    logs = {"filename": "", "max-size": 0, "max-backups": 0, "max-age": 0, "use-local-time": False}
    return ok(
        request,
        "main config returned",
        general={"pidfile": "", "stdout-logfile": "", "access-control-allow-origin": api.access_control_allow_origin},
        logging={**logs, "use-compression": False, "level": _level_name()},
        zookeeper={"servers": [], "timeout": 0, "root-path": ""},
        httpserver={"default": {"address": f"{api.host}:{api.port}", "tls": tls, "timeout": int(api.request_timeout)}},
    )


@routes.get("/v3/config/{coordinator:storage|evaluator|cluster|consumer}")
@routes.get("/v3/config/notifier")
async def module_list(request: web.Request) -> web.Response:
    coordinator = request.match_info.get("coordinator", "notifier")
    if coordinator == "notifier":
        names = sorted(await _subscriptions(request))
    else:
        names = ["default"] if coordinator in ("storage", "evaluator") else sorted(request.app[CONTEXT].config.clusters)
    return ok(request, "module list returned", coordinator=coordinator, modules=names)


@routes.get(named("/v3/config/storage/{name}"))
async def storage_detail(request: web.Request) -> web.Response:
    _default_only(request, "storage")
    window = request.app[CONTEXT].config.storage
    module = {
        "class-name": "redis",
        "intervals": window.intervals,
        "min-distance": int(window.min_distance),
        "group-allowlist": window.group_allowlist,
        "expire-group": int(window.expire_group),
    }
    return ok(request, "storage module detail returned", module=module)


@routes.get(named("/v3/config/evaluator/{name}"))
async def evaluator_detail(request: web.Request) -> web.Response:
    _default_only(request, "evaluator")
    return ok(request, "evaluator module detail returned", module={"class-name": "event-driven", "expire-cache": 0})


routes.get(named("/v3/config/cluster/{cluster}"))(cluster_detail)  # as Burrow: the handler of /v3/kafka/{cluster}


@routes.get(named("/v3/config/consumer/{name}"))
async def consumer_detail(request: web.Request) -> web.Response:
    config, name = request.app[CONTEXT].config, request.match_info["name"]
    if name not in config.clusters:
        raise ApiError(404, "consumer module not found")
    cluster = config.clusters[name]
    consumer = {
        "class-name": "kafka",
        "cluster": name,
        "servers": list(cluster.bootstrap_servers),
        "group-allowlist": config.group_filter(name).allowlist,
        "zookeeper-path": "",
        "zookeeper-timeout": 0,
        "client-profile": client_profile(cluster),
        "offsets-topic": cluster.offsets_topic,
        "start-latest": cluster.start_latest,
    }
    return ok(request, "consumer module detail returned", module=consumer)


@routes.get(named("/v3/config/notifier/{name}"))
async def notifier_detail(request: web.Request) -> web.Response:
    shown = (await _subscriptions(request)).get(request.match_info["name"])
    if shown is None:
        raise ApiError(404, "notifier module not found")
    return ok(request, "notifier module detail returned", module=notifier_module(shown))


def notifier_module(sub: dict[str, Any]) -> dict[str, Any]:
    """A subscription (masked, as the api shows it) in the shape of Burrow's notifier of its kind."""
    common = {
        "class-name": {"webhook": "http", "slack": "slack", "email": "email"}.get(sub["type"], sub["type"]),
        "group-allowlist": sub["group_allowlist"],
        "interval": int(sub["send_interval"]),
        "threshold": BURROW_THRESHOLDS[sub["threshold"]],
        "template-open": sub["body_template"],
        "template-close": sub["body_template"],
        "extra": sub["extras"],
        "send-close": sub["send_close"],
    }
    trust = {"extra-ca": sub["extra_ca"], "noverify": str(sub["noverify"]).lower()}
    if sub["type"] == "email":
        login = {"auth-type": "plain" if sub["username"] else "", "username": sub["username"]}
        mail = {"server": sub["smtp_host"], "port": sub["smtp_port"], "from": sub["from"], "to": ", ".join(sub["to"])}
        return {**common, **mail, **login, **trust}
    http = {"timeout": int(sub["timeout"]), "keepalive": 0}
    if sub["type"] == "slack":
        return {**common, **http, "channel": "", "username": "", "icon-url": "", "icon-emoji": ""}
    urls = {"url-open": sub["url"], "url-close": sub["url_close"]}
    return {**common, **http, **urls, "method-open": sub["method"], "method-close": sub["method_close"], **trust}


@routes.get("/v3/admin/loglevel")
async def get_log_level(request: web.Request) -> web.Response:
    return ok(request, "log level returned", level=_level_name())


@routes.post("/v3/admin/loglevel")
@requires_token
async def set_log_level(request: web.Request) -> web.Response:
    level = str((await read_json_body(request)).get("level", "")).lower()
    if level not in LOG_LEVELS:
        raise ApiError(400, f"level must be one of {', '.join(LOG_LEVELS)}")
    logging.getLogger().setLevel(LOG_LEVELS[level])
    return ok(request, "set log level")


def _level_name() -> str:
    level = logging.getLogger().getEffectiveLevel()
    return next((name for name, value in LOG_LEVELS.items() if value == level), logging.getLevelName(level).lower())


def _default_only(request: web.Request, kind: str) -> None:
    if request.match_info["name"] != "default":
        raise ApiError(404, f"{kind} module not found")


async def _subscriptions(request: web.Request) -> dict[str, dict[str, Any]]:
    """Every subscription by id, masked as `/api/v1/subscriptions` lists them (templates never shown here)."""
    return {doc["id"]: doc for doc in await shown_subscriptions(request, show_templates=False)}

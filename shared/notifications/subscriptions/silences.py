"""Silences (maintenance windows): what the api writes and the notifier reads, at the Redis keys
`lw:n:{notify}:silences` and `lw:n:{notify}:silences-version` — the two never import each other. A silence's
matchers and times: docs/webhooks.md, "Silences and hold-for"; what it does to notifications:
services/notifier/holds.py. Ending one early (DELETE) sets its `ends-at` to now; silences over for `RETENTION_S` are
dropped.
"""

from __future__ import annotations

import functools
import json
import secrets
import time
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec
from redis.asyncio import Redis

from lagwatch.shared.notifications.subscriptions.documents import DocumentInvalid
from lagwatch.shared.notifications.subscriptions.notification_policy import Event
from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.group_filter import compile_linear, linear_regex_error
from lagwatch.shared.runtime.redis_client import reply

MATCHER_NAMES = ("cluster", "group", "topic")
MAX_SILENCES = 10_000
MAX_MATCHERS = 10
MAX_VALUE_CHARS = 1000
MAX_TEXT_CHARS = 1000
MAX_DURATION_S = 366 * 86_400
RETENTION_S = 7 * 86_400  # an ended silence stays listed this long
PENDING, ACTIVE, EXPIRED = "pending", "active", "expired"


class SilenceInvalid(DocumentInvalid):
    """A silence refused."""


class Matcher(msgspec.Struct, frozen=True):
    name: str
    value: str
    regex: bool = False

    def test(self, text: str) -> bool:
        if not self.regex:
            return text == self.value
        return _compiled(self.value).fullmatch(text) is not None


_compiled = functools.lru_cache(maxsize=4 * MAX_SILENCES)(compile_linear)


class Silence(msgspec.Struct, frozen=True, rename="kebab"):  # stored as JSON with kebab-case keys
    id: str
    matchers: tuple[Matcher, ...]
    starts_at: float
    ends_at: float
    reason: str = ""
    created_by: str = ""
    created_at: float = 0.0

    def state(self, now: float) -> str:
        if now < self.starts_at:
            return PENDING
        return ACTIVE if now < self.ends_at else EXPIRED

    def matches(self, cluster: str, group: str, topics: Iterable[str]) -> bool:
        named = {"cluster": [cluster], "group": [group], "topic": list(topics)}  # a topic matcher wants some topics
        for m in self.matchers:
            texts = named.get(m.name)
            if texts is not None and not (texts and all(m.test(t) for t in texts)):
                return False
        return True

    def to_json(self, now: float | None = None) -> dict[str, Any]:
        doc: dict[str, Any] = msgspec.to_builtins(self)
        doc["matchers"] = list(doc["matchers"])
        if now is not None:
            doc["state"] = self.state(now)
        return doc


def _number(doc: Mapping[str, Any], name: str, errors: dict[str, str]) -> float | None:
    value = doc.get(name, doc.get(name.replace("-", "_")))
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value or abs(value) > 1e11:
        errors[name] = "epoch seconds (a number)"
        return None
    return float(value)


def _text(doc: Mapping[str, Any], name: str, errors: dict[str, str], *, required: bool) -> str:
    value = doc.get(name, doc.get(name.replace("-", "_"), ""))
    if not isinstance(value, str):
        errors[name] = "a string"
        return ""
    if required and not value.strip():
        errors[name] = "required"
    elif len(value) > MAX_TEXT_CHARS:
        errors[name] = f"at most {MAX_TEXT_CHARS} characters"
    return value.strip()


def _matchers(raw: Any, errors: dict[str, str]) -> tuple[Matcher, ...]:
    if not isinstance(raw, list) or not raw:
        errors["matchers"] = "required: a list of {name, value, regex}"
        return ()
    if len(raw) > MAX_MATCHERS:
        errors["matchers"] = f"at most {MAX_MATCHERS}"
        return ()
    out = []
    for i, item in enumerate(raw):
        where = f"matchers[{i}]"
        if not isinstance(item, Mapping) or set(item) - {"name", "value", "regex"}:
            errors[where] = "an object {name, value, regex}"
            continue
        name, value, regex = item.get("name"), item.get("value"), item.get("regex", False)
        if name not in MATCHER_NAMES:
            errors[f"{where}.name"] = f"one of {', '.join(MATCHER_NAMES)}"
        if not isinstance(value, str) or not value or len(value) > MAX_VALUE_CHARS:
            errors[f"{where}.value"] = f"a non-empty string of at most {MAX_VALUE_CHARS} characters"
            continue
        if not isinstance(regex, bool):
            errors[f"{where}.regex"] = "true or false"
            continue
        if regex and (reason := linear_regex_error(value)) is not None:
            errors[f"{where}.value"] = f"not a valid regular expression (RE2 syntax): {reason}"
            continue
        out.append(Matcher(str(name), value, regex))
    return tuple(out)


def parse_new(doc: Any, now: float, new_id: str | None = None) -> Silence:
    """A silence from an api request; SilenceInvalid with every problem. `starts-at` defaults to now."""
    if not isinstance(doc, Mapping):
        raise SilenceInvalid({"body": "expected a JSON object"})
    known = {"matchers", "starts-at", "ends-at", "reason", "created-by"}
    errors = {str(k): "unknown field" for k in doc if str(k).replace("_", "-") not in known}
    matchers = _matchers(doc.get("matchers"), errors)
    starts = _number(doc, "starts-at", errors)
    ends = _number(doc, "ends-at", errors)
    reason = _text(doc, "reason", errors, required=False)
    created_by = _text(doc, "created-by", errors, required=True)
    starts = now if starts is None else starts
    if ends is None:
        errors.setdefault("ends-at", "required (epoch seconds)")
    elif "ends-at" not in errors and "starts-at" not in errors:
        if ends <= max(starts, now):
            errors["ends-at"] = "must be after starts-at and in the future"
        elif ends - starts > MAX_DURATION_S:
            errors["ends-at"] = "a silence lasts at most a year"
    if errors:
        raise SilenceInvalid(errors)
    assert ends is not None
    return Silence(new_id or "sil-" + secrets.token_hex(6), matchers, starts, ends, reason, created_by, now)


def from_json(text: bytes | str) -> Silence:
    return msgspec.json.decode(text, type=Silence)


def silenced_until(
    silences: Iterable[Silence], cluster: str, group: str, topics: Iterable[str], now: float
) -> float | None:
    """Until when (epoch seconds) silences hold notifications of this group back, counting one that starts as
    another ends; None when none holds now."""
    topics = list(topics)
    matching = [s for s in silences if s.ends_at > now and s.matches(cluster, group, topics)]
    until = None
    moved = True
    while moved:
        moved = False
        for s in matching:
            begins_in_time = s.starts_at <= (now if until is None else until)
            if begins_in_time and (until is None or s.ends_at > until):
                until, moved = s.ends_at, True
    return until


class SilenceStore:
    """Silences in Redis; every change bumps the version the notifiers watch."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    async def version(self) -> int:
        return int(await self.redis.get(keys.SILENCES_VERSION) or 0)

    async def all(self) -> list[Silence]:
        out = []
        for text in (await reply(self.redis.hgetall(keys.SILENCES))).values():
            try:
                out.append(from_json(text))
            except ValueError:  # unreadable (msgspec.DecodeError): the others still count
                continue
        return sorted(out, key=lambda s: (s.starts_at, s.id))

    async def get(self, silence_id: str) -> Silence | None:
        text = await reply(self.redis.hget(keys.SILENCES, silence_id))
        return None if text is None else from_json(text)

    async def count_not_ended(self, now: float | None = None) -> int:
        """Silences pending or active: what the api's cap counts (ended ones are only kept for the record, and
        counting them would let a token holder block new silences for a week by creating and ending them)."""
        now = time.time() if now is None else now
        return sum(1 for s in await self.all() if s.ends_at > now)

    async def put(self, silence: Silence, now: float | None = None) -> None:
        """Store a silence; ended ones over `RETENTION_S` go, and the oldest ended beyond MAX_SILENCES (the record of
        ended silences stays bounded however many are made and ended)."""
        now = time.time() if now is None else now
        ended = [s for s in await self.all() if s.ends_at <= now and s.id != silence.id]
        ended.sort(key=lambda s: (s.ends_at, s.id))
        stale = [s.id for s in ended if s.ends_at < now - RETENTION_S]
        stale += [s.id for s in ended[: max(0, len(ended) - MAX_SILENCES)] if s.id not in stale]
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(keys.SILENCES, silence.id, json.dumps(silence.to_json(), sort_keys=True))
            if stale:
                pipe.hdel(keys.SILENCES, *stale)
            pipe.incr(keys.SILENCES_VERSION)
            await pipe.execute()

    async def end(self, silence_id: str, now: float | None = None) -> Silence | None:
        """End a silence now (it stays listed, expired); None when there is no such silence."""
        now = time.time() if now is None else now
        silence = await self.get(silence_id)
        if silence is None:
            return None
        if silence.ends_at > now:
            silence = msgspec.structs.replace(silence, starts_at=min(silence.starts_at, now), ends_at=now)
            await self.put(silence, now)
        return silence


class SilenceCache:
    """A notifier's copy of the silences, reloaded when their version moves."""

    def __init__(self, store: SilenceStore) -> None:
        self.store = store
        self.silences: list[Silence] = []
        self.version: int | None = None
        self._changed = False

    async def refresh(self) -> None:
        version = await self.store.version()
        if version == self.version:
            return
        self.silences = await self.store.all()
        self._changed = True  # the first load too: a silence may have ended while this notifier was down
        self.version = version

    def take_change(self) -> bool:
        """Whether the silences changed since this was last asked (held notifications may be due earlier)."""
        changed, self._changed = self._changed, False
        return changed

    def until_ms(self, event: Event, now_ms: int) -> int | None:
        """Until when (epoch ms) silences hold this event's notifications back; None when none does."""
        if not self.silences:
            return None
        until = silenced_until(self.silences, event.cluster, event.group, event.topics, now_ms / 1000)
        return None if until is None else int(until * 1000)

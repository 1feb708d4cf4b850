"""`lagwatch migrate burrow-config burrow.toml`: a Burrow configuration as lagwatch's YAML.

Clusters (with their client profile's client id, TLS and SASL, and their consumer's offsets topic, start-latest
and group lists), storage, evaluator, the HTTP server, and HTTP notifiers as webhook subscriptions — their Go
templates rewritten in Jinja2 (go_template.py) where Burrow's helpers allow. Whatever has no counterpart, or
changes meaning, is a warning (printed on stderr by the command). Option names: docs/migrating-from-burrow.md.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lagwatch.go_template import Untranslatable, translate
from lagwatch.shared.runtime.config import ORIGIN

THRESHOLDS = {0: "OK", 1: "OK", 2: "WARN", 3: "ERR"}  # Burrow's status numbers (0: NOTFOUND is never notified)
BURROW_TIMEOUT_S = 5  # Burrow's http notifier default
MAIL_HEADER_LINES = ("Subject: ", "Content-Type: ", "MIME-version: ")  # read by Burrow's email notifier
BURROW_INTERVAL_S = 60  # Burrow's notifier `interval` default (and `send-interval`'s)
IGNORED_SECTIONS = {
    "logging": "use `lagwatch run … --log-file FILE --log-level LEVEL`; rotation is logrotate's",
    "zookeeper": "not needed: Kafka consumer groups and Redis share the work",
}


@dataclass
class Migration:
    config: dict[str, Any]
    warnings: list[str] = field(default_factory=list)

    def yaml(self, source: str = "burrow.toml") -> str:
        header = f"# lagwatch configuration translated from {source} by `lagwatch migrate burrow-config`\n"
        return header + yaml.dump(self.config, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (templates) as literal blocks."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value and not any(c in value for c in "\r\t") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def migrate_file(path: Path, template_dirs: list[Path] | None = None) -> Migration:
    """Read Burrow's TOML (ValueError when it is not TOML) and translate it. Template files are looked for as
    Burrow's paths say, then by name in `template_dirs` and beside the configuration file."""
    try:
        burrow = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path} is not valid TOML: {exc}") from None
    return migrate(burrow, [*(template_dirs or []), path.parent])


def migrate(burrow: Mapping[str, Any], template_dirs: list[Path] | None = None) -> Migration:
    source = _Burrow(burrow)
    config = _configuration(source, template_dirs or [])
    return Migration(config, list(dict.fromkeys(source.warnings)))


def _servers(where: str, value: Any) -> list[str]:
    """`servers` as Burrow reads it (viper's string slice): a list, or one string of space-separated brokers."""
    if isinstance(value, str):
        return value.split()
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise ValueError(f'{where} servers: expected a list of "host:port" strings, got {value!r}')
    return list(value)


def _present(body: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {key: body[key] for key in keys if key in body}


def _set(body: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """The keys given a value (Burrow reads an empty one as unset)."""
    return {key: body[key] for key in keys if body.get(key)}


def _open_or_close(opened: str, closed: str) -> str:
    return f'{{% if notification.kind == "close" %}}{closed}{{% else %}}{opened}{{% endif %}}'


class _Burrow:
    """Burrow's configuration as read, and the warnings its translation collects."""

    def __init__(self, burrow: Mapping[str, Any]) -> None:
        self.burrow = burrow
        self.warnings: list[str] = []

    def warn(self, where: str, text: str) -> None:
        self.warnings.append(f"{where}: {text}")

    def section(self, name: str) -> dict[str, Mapping[str, Any]]:
        value = self.burrow.get(name) or {}
        if not isinstance(value, Mapping):  # `client-profile = 5`: not Burrow's [client-profile.<name>] tables
            raise ValueError(f"[{name}]: expected tables [{name}.<name>], got {value!r}")
        return {k: v for k, v in value.items() if isinstance(v, Mapping)}

    def one(self, kind: str, translate_one: Callable[[_Burrow, str, Mapping[str, Any]], dict[str, Any]]) -> dict:
        modules = self.section(kind)
        if len(modules) > 1:
            self.warn(
                f"[{kind}]", f"{len(modules)} modules; lagwatch has one: the first ({next(iter(modules))}) is used"
            )
        for name, body in modules.items():
            return translate_one(self, f"[{kind}.{name}]", body)
        return {}

    def unused(self, where: str, body: Mapping[str, Any], used: set[str], why: Mapping[str, str] | None = None) -> None:
        for key in sorted(set(body) - used):
            self.warn(where, f"{key} is not carried over" + (f": {why[key]}" if why and key in why else ""))


def _configuration(burrow: _Burrow, template_dirs: list[Path]) -> dict[str, Any]:
    out: dict[str, Any] = {"redis": {"url": "redis://127.0.0.1:6379/0"}}
    known = {"cluster", "consumer", "client-profile", "tls", "sasl", "iam", "storage", "evaluator", "httpserver",
             "notifier", "general", *IGNORED_SECTIONS}  # fmt: skip
    for name, why in IGNORED_SECTIONS.items():
        if name in burrow.burrow:
            burrow.warn(f"[{name}]", f"not carried over: {why}")
    for name in sorted(set(burrow.burrow) - known):
        burrow.warn(f"[{name}]", "unknown section, not carried over")
    out["clusters"] = _Clusters(burrow).clusters()
    sections = {
        "storage": burrow.one("storage", _storage),
        "evaluator": burrow.one("evaluator", _evaluator),
        "api": {**burrow.one("httpserver", _httpserver), **_general(burrow)},
        "subscriptions": _Notifiers(burrow, template_dirs).subscriptions(),
    }
    return out | {name: section for name, section in sections.items() if section}


class _Part:
    """One part of the translation: it reads Burrow's sections and warns through the one `_Burrow`."""

    def __init__(self, burrow: _Burrow) -> None:
        self.warn, self.section, self.unused = burrow.warn, burrow.section, burrow.unused


class _Clusters(_Part):
    """[cluster] and [consumer] as lagwatch's clusters, with their client profiles' TLS and SASL logins."""

    def clusters(self) -> dict[str, Any]:
        clusters: dict[str, dict[str, Any]] = {}
        for name, body in self.section("cluster").items():
            where = f"[cluster.{name}]"
            if body.get("class-name", "kafka") != "kafka":
                self.warn(where, f"class-name {body['class-name']!r} is not supported; skipped")
                continue
            out: dict[str, Any] = {}
            if body.get("servers"):
                out["bootstrap-servers"] = _servers(where, body["servers"])
            out.update(_present(body, ("topic-refresh", "offset-refresh")))
            out.update(self.client_profile(where, body.get("client-profile")))
            self.unused(where, body, {"class-name", "servers", "topic-refresh", "offset-refresh", "client-profile"},
                        {"groups-reaper-refresh": "groups go away on their group-metadata tombstone or after "
                         "storage.expire-group"})  # fmt: skip
            clusters[name] = out
        consumed: set[str] = set()
        for name, body in self.section("consumer").items():
            self.consumer(f"[consumer.{name}]", body, clusters, consumed)
        if not clusters:
            self.warn("[cluster]", "no Kafka cluster: add one under clusters:")
        return clusters

    def consumer(
        self, where: str, body: Mapping[str, Any], clusters: dict[str, dict[str, Any]], consumed: set[str]
    ) -> None:
        if body.get("class-name", "kafka") != "kafka":
            self.warn(where, f"class-name {body.get('class-name')!r}: offsets in ZooKeeper are not read; skipped")
            return
        name = str(body.get("cluster", ""))
        cluster = clusters.get(name)
        if cluster is None:
            self.warn(where, f"its cluster {name!r} is not configured; skipped")
            return
        if name in consumed:
            self.warn(where, "a second consumer of the same cluster: lagwatch reads a cluster's offsets once; skipped")
            return
        consumed.add(name)
        if body.get("servers") and _servers(where, body["servers"]) != cluster.get("bootstrap-servers"):
            self.warn(where, "servers differ from its cluster's: lagwatch uses the cluster's bootstrap-servers")
        cluster.update(_present(body, ("offsets-topic", "start-latest")))
        for old, new in (("group-whitelist", "group-allowlist"), ("group-blacklist", "group-denylist")):
            if body.get(old) and not body.get(new):
                cluster[new] = body[old]
        cluster.update(_set(body, ("group-allowlist", "group-denylist")))
        for key, value in self.client_profile(where, body.get("client-profile")).items():
            cluster.setdefault(key, value)  # the cluster's own profile first
        self.unused(where, body, {"class-name", "cluster", "servers", "offsets-topic", "start-latest", "client-profile",
                                  "group-whitelist", "group-blacklist", "group-allowlist", "group-denylist"},
                    {"backfill-earliest": "a brand-new ingest group reads the offsets topic from its beginning "
                     "unless start-latest"})  # fmt: skip

    def client_profile(self, where: str, name: Any) -> dict[str, Any]:
        if not name:
            return {}
        if not isinstance(name, str):
            raise ValueError(f"{where} client-profile: expected a profile's name, got {name!r}")
        profiles = self.section("client-profile")
        if name not in profiles:
            self.warn(where, f"client-profile {name!r} is not defined")
            return {}
        body = profiles[name]
        here = f"[client-profile.{name}]"
        out: dict[str, Any] = _present(body, ("client-id",))
        if body.get("tls"):
            out["tls"] = self.tls(here, body["tls"])
        if body.get("sasl"):
            out["sasl"] = self.sasl(here, body["sasl"])
        if body.get("iam"):  # Burrow's MSK IAM login (SASL OAUTHBEARER over TLS): lagwatch's AWS_MSK_IAM
            if body.get("sasl"):
                self.warn(here, "sasl and iam both set: iam is written (MSK's IAM listener takes no other login)")
            out["sasl"] = self.iam(here, body["iam"])
            out.setdefault("tls", {"enabled": True})  # the IAM listener is TLS only
        self.unused(
            here,
            body,
            {"client-id", "tls", "sasl", "iam", "kafka-version"},
            {"dial-timeout": "librdkafka's defaults apply", "read-timeout": "librdkafka's defaults apply"},
        )
        return out

    def tls(self, where: str, name: str) -> dict[str, Any]:
        profiles = self.section("tls")
        body = profiles.get(name, {})
        if name not in profiles:
            self.warn(where, f"tls profile {name!r} is not defined: TLS with the system's CAs")
        out: dict[str, Any] = {"enabled": True}
        for old, new in (("cafile", "ca-file"), ("certfile", "cert-file"), ("keyfile", "key-file")):
            if body.get(old):
                out[new] = body[old]
        if body.get("noverify"):
            out["verify-hostname"] = False
            self.warn(f"[tls.{name}]", "noverify: lagwatch still checks the brokers' certificate chain (only the "
                      "host-name check is off)")  # fmt: skip
        return out

    def sasl(self, where: str, name: str) -> dict[str, Any]:
        profiles = self.section("sasl")
        if name not in profiles:
            self.warn(where, f"sasl profile {name!r} is not defined")
            return {}
        body = profiles[name]
        mechanism = str(body.get("mechanism") or "PLAIN").upper()
        if mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            self.warn(f"[sasl.{name}]", f"mechanism {mechanism!r} is not supported; PLAIN is written")
            mechanism = "PLAIN"
        return {"mechanism": mechanism, "username": body.get("username", ""), "password": body.get("password", "")}

    def iam(self, where: str, name: str) -> dict[str, Any]:
        profiles = self.section("iam")
        if name not in profiles:
            self.warn(where, f"iam profile {name!r} is not defined: the AWS environment's region and credentials")
        body = profiles.get(name, {})
        aws = _set(body, ("region", "role-arn", "profile"))
        if "role-arn" in aws and "profile" in aws:
            del aws["profile"]
            self.warn(f"[iam.{name}]", "profile is dropped: lagwatch assumes role-arn with the default credentials "
                      "(a profile of ~/.aws/config may name the role itself)")  # fmt: skip
        self.unused(f"[iam.{name}]", body, {"region", "role-arn", "profile"})
        return {"mechanism": "AWS_MSK_IAM", **({"aws": aws} if aws else {})}


# --- storage, evaluator, api ------------------------------------------------------------------------------------


def _storage(burrow: _Burrow, where: str, body: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: body[k] for k in ("intervals", "expire-group", "min-distance", "group-allowlist", "group-denylist")
           if body.get(k) not in (None, "")}  # fmt: skip
    burrow.unused(where, body, {"class-name", *out, "group-allowlist", "group-denylist"},
                  {"workers": "scale with ingest workers", "queue-depth": "scale with ingest workers"})  # fmt: skip
    return out


def _evaluator(burrow: _Burrow, where: str, body: Mapping[str, Any]) -> dict[str, Any]:
    out = _present(body, ("minimum-complete", "allowed-lag"))
    burrow.unused(where, body, {"class-name", *out}, {"expire-cache": "groups are evaluated as commits arrive"})
    return out


def _httpserver(burrow: _Burrow, where: str, body: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    address = str(body.get("address", ":8000"))
    host, _, port = address.rpartition(":")
    out["host"] = host.strip("[]") or "0.0.0.0"
    if port.isdigit():
        out["port"] = int(port)
    if "timeout" in body:
        out["request-timeout"] = body["timeout"]
    if body.get("tls"):
        out.update(_server_tls(burrow, where, str(body["tls"])))
    burrow.unused(where, body, {"address", "timeout", "tls"})
    return out


def _server_tls(burrow: _Burrow, where: str, name: str) -> dict[str, Any]:
    """The listener's certificate and key, from the TLS profile the HTTP server names."""
    body = burrow.section("tls").get(name, {})
    if not body.get("certfile"):
        burrow.warn(where, f"tls profile {name!r} names no certfile: the api serves plain HTTP")
        return {}
    out = {"tls-cert-file": body["certfile"]}
    if body.get("keyfile"):
        out["tls-key-file"] = body["keyfile"]
    return out


def _general(burrow: _Burrow) -> dict[str, Any]:
    """[general]: its CORS origin is the api's; the rest is a supervisor's business."""
    body = burrow.burrow.get("general", {})
    if not isinstance(body, Mapping):
        raise ValueError(f"[general]: expected a table, got {body!r}")
    supervisor = "run under a supervisor (systemd, Kubernetes)"
    burrow.unused(
        "[general]", body, {"access-control-allow-origin"}, {"pidfile": supervisor, "stdout-logfile": supervisor}
    )
    origin = body.get("access-control-allow-origin")
    if origin and not ORIGIN.match(str(origin)):  # Burrow sends what it is given; no browser matches a bare host
        burrow.warn("[general]", f"access-control-allow-origin {origin!r} is not an origin a browser sends "
                    "(https://host[:port]): not carried over")  # fmt: skip
        return {}
    return {"access-control-allow-origin": origin} if origin else {}


# --- notifiers --------------------------------------------------------------------------------------------------


class _Notifiers(_Part):
    """[notifier] modules as subscriptions: http as webhooks, email as e-mail, their templates in Jinja2."""

    def __init__(self, burrow: _Burrow, template_dirs: list[Path]) -> None:
        super().__init__(burrow)
        self.templates = _Templates(burrow, template_dirs)

    def subscriptions(self) -> list[dict[str, Any]]:
        return [s for name, body in self.section("notifier").items() if (s := self.notifier(name, body))]

    def notifier(self, name: str, body: Mapping[str, Any]) -> dict[str, Any] | None:
        where = f"[notifier.{name}]"
        kind = body.get("class-name", "")
        if kind not in ("http", "email"):
            self.warn(where, f"class-name {kind!r} is not translated" + (": nothing to send" if kind == "null" else ""))
            return None
        sub: dict[str, Any] = {"id": name}
        send_close = bool(body.get("send-close", False))
        used = self.http(where, body, sub, send_close) if kind == "http" else self.email(where, body, sub)
        if used is None:
            return None
        sub["threshold"] = self.threshold(where, body)
        sub["send-close"] = send_close  # written whatever it is: Burrow's default (false) is not lagwatch's (true)
        if body.get("send-once"):
            sub["send-once"] = True
        sub["send-interval"] = body.get("send-interval", body.get("interval", BURROW_INTERVAL_S))
        sub.update(_set(body, ("group-allowlist", "group-denylist")))
        if body.get("extras"):
            if not isinstance(body["extras"], Mapping):
                raise ValueError(f"{where} extras: expected a table of names to values, got {body['extras']!r}")
            sub["extras"] = {str(k): str(v) for k, v in body["extras"].items()}
        template = self.templates.body(where, body, send_close, email=kind == "email")
        if template:
            sub["body-template"] = template
        self.unused(where, body, {"class-name", "threshold", "send-close", "send-once", "send-interval", "interval",
                                  "group-allowlist", "group-denylist", "extras", "template-open", "template-close",
                                  *used},
                    {"keepalive": "connections are pooled by the notifier",
                     "disable-http-keepalive": "connections are pooled by the notifier"})  # fmt: skip
        if body.get("interval") and "send-interval" not in body:
            self.warn(where, "interval: lagwatch notifies each status change at once; send-interval repeats it")
        return sub

    def threshold(self, where: str, body: Mapping[str, Any]) -> str:
        try:
            threshold = int(body.get("threshold", 2))
        except (TypeError, ValueError):
            self.warn(where, f"threshold {body['threshold']!r} is not a number; WARN (Burrow's default) is written")
            threshold = 2
        if threshold > 3:
            self.warn(where, f"threshold {threshold}: Burrow never notifies group statuses above 3; ERR is written")
        return THRESHOLDS.get(threshold, "ERR")

    def http(self, where: str, body: Mapping[str, Any], sub: dict[str, Any], send_close: bool) -> set[str] | None:
        """A webhook subscription's own options; the Burrow options it used (None: skipped)."""
        if not body.get("url-open"):
            self.warn(where, "no url-open; skipped")
            return None
        sub["type"] = "webhook"
        sub.update(self.templates.urls(where, body, send_close))
        if body.get("method-open"):
            sub["method"] = str(body["method-open"]).upper()
        if send_close and not body.get("url-close"):
            self.warn(where, "send-close without url-close (Burrow refuses to start): closes go to url")
        if send_close and body.get("method-close"):
            sub["method-close"] = str(body["method-close"]).upper()
        sub["timeout"] = body.get("timeout", BURROW_TIMEOUT_S)
        sub.update(_set(body, ("username", "password", "extra-ca")))
        if body.get("noverify"):
            sub["noverify"] = True
            self.warn(where, "noverify: certificates are not checked (as in Burrow); prefer extra-ca")
        if body.get("headers"):
            sub["headers"] = {str(k): str(v) for k, v in body["headers"].items()}
        return {"url-open", "url-close", "method-open", "method-close", "timeout", "username", "password", "extra-ca",
                "noverify", "headers"}  # fmt: skip

    def email(self, where: str, body: Mapping[str, Any], sub: dict[str, Any]) -> set[str] | None:
        """An email subscription's own options (Burrow's server, port, auth-type, from, to)."""
        sub["type"] = "email"
        sub["smtp-host"] = str(body.get("server", ""))
        if body.get("port"):
            sub["smtp-port"] = int(body["port"])
        sub["from"] = str(body.get("from", ""))
        sub["to"] = [a.strip() for a in str(body.get("to", "")).split(",") if a.strip()]
        if not (sub["smtp-host"] and sub["from"] and sub["to"]):
            self.warn(where, "server, from and to are needed (Burrow refuses to start without them): fill them in")
        auth = str(body.get("auth-type", "")).lower()
        if auth:
            sub["username"], sub["password"] = str(body.get("username", "")), str(body.get("password", ""))
            if auth != "plain":
                self.warn(where, f"auth-type {auth}: the SMTP AUTH mechanism is negotiated with the server")
        if sub.get("smtp-port") != 465:
            self.warn(where, "lagwatch sends mail only over STARTTLS (starttls: true); a server without it needs "
                      "starttls: false")  # fmt: skip
        if body.get("extra-ca") or body.get("noverify"):
            self.warn(where, "extra-ca / noverify: mail servers are checked against the system's CAs (SSL_CERT_FILE)")
        return {"server", "port", "auth-type", "username", "password", "from", "to", "extra-ca", "noverify"}


class _Templates(_Part):
    """A notifier's Go templates (its URLs, its template files) in Jinja2, read from Burrow's paths or by name."""

    def __init__(self, burrow: _Burrow, template_dirs: list[Path]) -> None:
        super().__init__(burrow)
        self.template_dirs = template_dirs

    def urls(self, where: str, body: Mapping[str, Any], send_close: bool) -> dict[str, Any]:
        """url (and url-close); Burrow's URLs are templates too: one with actions becomes a url-template."""
        url_open, url_close = str(body["url-open"]), str(body.get("url-close") or "") if send_close else ""
        if "{{" not in url_open + url_close:
            return {"url": url_open, **({"url-close": url_close} if url_close else {})}
        try:
            opened = translate(url_open).source
            closed = translate(url_close).source if url_close else opened
        except Untranslatable as exc:
            self.warn(where, f"url template not translated ({exc}); the URL is written as it is")
            return {"url": url_open.split("{{")[0] or url_open}
        base = url_open.split("{{")[0]
        self.warn(where, f"url-open/url-close are templates: url-template written, url set to {base!r} (its host)")
        return {"url": base, "url-template": opened if closed == opened else _open_or_close(opened, closed)}

    def body(self, where: str, body: Mapping[str, Any], send_close: bool, *, email: bool = False) -> str:
        opened = self.template(where, "template-open", body.get("template-open"), email=email)
        closed = self.template(where, "template-close", body.get("template-close"), email=email) if send_close else None
        if opened is None:
            return ""
        return opened if closed is None or closed == opened else _open_or_close(opened, closed)

    def template(self, where: str, key: str, path: Any, *, email: bool = False) -> str | None:
        if not path:
            return None
        text = self.read(str(path))
        if text is None:
            self.warn(where, f"{key} {path} not found (give its folder with --templates): the default body is sent")
            return None
        if email:  # Burrow takes its mail headers from these lines; lagwatch writes its own
            lines = text.split("\n")
            text = "\n".join(line for line in lines if not line.startswith(MAIL_HEADER_LINES))
            if len(lines) != len(text.split("\n")):
                self.warn(where, f"{key} {path}: its Subject/Content-Type lines are dropped (the subject is "
                          "lagwatch's: [lagwatch] and the notification's title)")  # fmt: skip
        try:
            translation = translate(text)
        except Untranslatable as exc:
            self.warn(where, f"{key} {path} not translated ({exc}): the default body is sent")
            return None
        for note in translation.notes:
            self.warn(where, f"{key} {path}: {note}")
        return translation.source

    def read(self, path: str) -> str | None:
        for candidate in [Path(path)] + [d / Path(path).name for d in self.template_dirs]:
            try:
                return candidate.read_text()
            except OSError:
                continue
        return None

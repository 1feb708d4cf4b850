"""The one `lagwatch` command (`lagwatch --help` lists its commands). Subcommands import what they need lazily, so the
tool starts fast.

Usage errors and invalid input exit with code 2 and one line on stderr; a service that cannot start for want of
something outside lagwatch (the archiver's object store) exits with code 1 and one line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

USAGE_ERROR = 2
START_FAILED = 1
CONFIG_HELP = "YAML or TOML file (default: $LAGWATCH_CONFIG)"


class InputError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


class StartError(Exception):
    """A service could not start for a reason outside the user's input: printed as one line, exit code 1."""


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["spark", "reprocess"]:  # the job parses its own options (it is spark-submit-able alone too)
        return _spark_reprocess(argv[2:])
    parser = _parser()
    args = parser.parse_args(argv)
    args.argv = argv  # what `run ingest --workers N` passes on to its workers
    if not getattr(args, "handler", None):  # `lagwatch` or a command group alone: the help of what was typed
        getattr(args, "group_parser", parser).print_help(sys.stderr)
        return USAGE_ERROR
    try:
        return args.handler(args) or 0
    except (InputError, StartError) as exc:
        print(f"lagwatch: {exc}", file=sys.stderr)
        return USAGE_ERROR if isinstance(exc, InputError) else START_FAILED
    except KeyboardInterrupt:
        return 130


# The `commands` of the top-level parser, added below in the order `lagwatch --help` lists them.
_Commands = argparse._SubParsersAction  # argparse names no public type for it


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lagwatch", description="Kafka consumer-lag monitoring with Burrow's rules.")
    commands = parser.add_subparsers(title="commands")
    _add_offline_commands(commands)
    _add_service_commands(commands)
    _add_state_commands(commands)
    _add_tool_commands(commands)
    return parser


def _group(commands: _Commands, name: str, help_text: str) -> _Commands:
    """A command group (`lagwatch rules ...`); typed alone, it prints its own help."""
    group = commands.add_parser(name, help=help_text)
    group.set_defaults(group_parser=group)
    return group.add_subparsers(title=f"{name} commands")


def _command(
    commands: _Commands, name: str, help_text: str, handler: Callable[[argparse.Namespace], int]
) -> argparse.ArgumentParser:
    command = commands.add_parser(name, help=help_text)
    command.set_defaults(handler=handler)
    return command


def _add_offline_commands(commands: _Commands) -> None:
    """What reads its input alone: the rules and the offsets codec."""
    rules = _group(commands, "rules", "the evaluation rules")
    evaluate = _command(rules, "eval", "evaluate one group given as a JSON request (stdin by default)", _rules_eval)
    evaluate.add_argument("--file", type=Path, help="read the request from this file instead of stdin")
    offsets = _group(commands, "offsets", "the __consumer_offsets codec")
    decode = _command(offsets, "decode", "decode one record given as hex", _offsets_decode)
    decode.add_argument("key_hex", help="the record key, hex")
    decode.add_argument("value_hex", nargs="?", default=None, help="the record value, hex (absent = tombstone)")


def _add_service_commands(commands: _Commands) -> None:
    """A service, and what checks its configuration and its cluster first."""
    run = _command(commands, "run", "run a service until SIGTERM/Ctrl-C", _run_service)
    run.add_argument("service", choices=["ingest", "evaluator", "api", "notifier", "archiver"], help="which service")
    run.add_argument("--config", type=Path, default=None, help=CONFIG_HELP)
    run.add_argument("--cluster", default=None, help="the configured cluster to watch (default: the only one)")
    run.add_argument(
        "--http-port", type=int, default=None, help="port of /healthz, /readyz and /metrics (api: its port)"
    )
    run.add_argument(
        "--workers",
        type=int,
        default=None,
        help="ingest: worker processes (default: ingest.workers; 0: one per CPU but one)",
    )
    run.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    run.add_argument("--log-file", type=Path, default=None, help="log here instead of stderr")
    check = _command(
        commands,
        "check-kafka",
        "connect to a configured cluster with its TLS and SASL login; print what lagwatch sees",
        _check_kafka,
    )
    check.add_argument("--config", type=Path, default=None, help=CONFIG_HELP)
    check.add_argument("--cluster", default=None, help="the configured cluster (default: the only one)")
    check.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the brokers' answer")
    config = _group(commands, "config", "the configuration")
    help_text = "load the configuration as the services do and check it without connecting to anything"
    checked = _command(config, "check", help_text, _config_check)
    checked.add_argument("--config", type=Path, default=None, help=CONFIG_HELP)
    checked.add_argument("--show", action="store_true", help="print the effective configuration, credentials masked")


def _add_state_commands(commands: _Commands) -> None:
    """What acts on the state in Redis and Kafka: a cluster's, the notifier's dead letters."""
    help_text = "delete what Redis keeps of a cluster removed from the configuration; its incidents are closed"
    forget = _command(commands, "forget-cluster", help_text, _forget_cluster)
    forget.add_argument("cluster", help="the cluster's name, as it was configured")
    forget.add_argument("--config", type=Path, default=None, help=CONFIG_HELP)
    forget.add_argument("--dry-run", action="store_true", help="count what would be deleted; change nothing")
    notify = _group(commands, "notify", "the notifier")
    replay = _command(notify, "replay-dlq", "put dead-lettered notifications back into the outbox", _notify_replay_dlq)
    replay.add_argument("--subscription", default=None, help="only this subscription's dead letters")
    replay.add_argument("--since", default=None, help="only those dead-lettered since: 30m, 2h, 1d, epoch, ISO-8601")
    replay.add_argument("--config", type=Path, default=None, help=CONFIG_HELP)
    replay.add_argument("--cluster", default=None, help="the cluster holding the dead-letter topic")
    test = _command(notify, "test", "send a sample incident's open and close to a subscription now", _notify_test)
    test.add_argument("subscription", help="the subscription's id (the configuration file's or the api's)")
    test.add_argument("--cluster", default=None, help="the cluster the sample names (default: one it covers)")
    test.add_argument(
        "--sample",
        choices=("status", "lag", "retention"),
        default="status",
        help="a status incident, a lag-seconds alert, or a retention (data-loss-risk) alert",
    )
    test.add_argument("--config", type=Path, default=None, help=CONFIG_HELP)


def _add_tool_commands(commands: _Commands) -> None:
    """Moving from Burrow, replaying the history, running everything locally."""
    migrate = _group(commands, "migrate", "moving from Burrow")
    help_text = "print a Burrow configuration (TOML) as lagwatch's YAML; warnings go to stderr"
    burrow = _command(migrate, "burrow-config", help_text, _migrate_burrow_config)
    burrow.add_argument("burrow_toml", type=Path, help="Burrow's configuration file")
    burrow.add_argument(
        "--templates", type=Path, action="append", default=[], help="a folder holding the notifiers' templates"
    )
    spark = _group(commands, "spark", "history reprocessing on Spark")  # its options are the job's (main hands them on)
    reprocess = spark.add_parser(
        "reprocess", help="replay commit history with the live rules (--help for its options)", add_help=False
    )
    reprocess.add_argument("job_args", nargs=argparse.REMAINDER, help="options of the job (see --help)")
    dev = _group(commands, "dev", "local infrastructure")
    help_text = "run Redis, the Kafka mock, every service and a demo workload on localhost until Ctrl-C"
    up = _command(dev, "up", help_text, _dev_up)
    up.add_argument("--no-demo", action="store_true", help="only Redis and the Kafka mock cluster")
    up.add_argument("--api-port", type=_port, default=8000, help="the api's port, if free (0: any free port)")
    up.add_argument("--state-dir", type=Path, default=Path(".local"), help="where addresses and data go")
    up.add_argument("--redis-port", type=_port, default=None, help="fixed Redis port (default: a free one)")
    up.add_argument("--kafka-port", type=_port, default=None, help="fixed Kafka port (default: a free one)")


def _port(text: str) -> int:
    """A port option's value (argparse: a usage error, not a traceback from the bind)."""
    port = int(text) if text.strip().isdigit() else -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"not a port (0-65535): {text!r}")
    return port


@contextlib.contextmanager
def _input_errors(*kinds: type[Exception], prefix: str = "") -> Iterator[None]:
    """An error of these kinds is the user's input's: InputError (one line, exit code 2)."""
    try:
        yield
    except kinds as exc:
        raise InputError(f"{prefix}{exc}") from None


def _config(args: argparse.Namespace) -> Any:
    """The configuration as the services load it: defaults, --config (or $LAGWATCH_CONFIG), the environment."""
    from lagwatch.shared.runtime.config import ConfigError, load_config

    with _input_errors(ConfigError):
        return load_config(args.config)


def _config_and_cluster(args: argparse.Namespace) -> tuple[Any, str]:
    """The configuration and the configured cluster --cluster names (default: the only one)."""
    from lagwatch.shared.runtime.config import ConfigError

    config = _config(args)
    with _input_errors(ConfigError):
        cluster = args.cluster or config.only_cluster()
        config.cluster(cluster)
    return config, cluster


def _rules_eval(args: argparse.Namespace) -> int:
    from lagwatch.rules_request import RequestError, evaluate_request

    try:
        text = args.file.read_text() if args.file else sys.stdin.read()
    except OSError as exc:
        raise InputError(f"cannot read {args.file}: {exc.strerror}") from None
    with _input_errors(json.JSONDecodeError, prefix="request is not valid JSON: "):
        doc = json.loads(text)
    with _input_errors(RequestError, prefix="invalid request: "):
        answer = evaluate_request(doc)
    print(json.dumps(answer, indent=2))
    return 0


def _offsets_decode(args: argparse.Namespace) -> int:
    from lagwatch.offsets_view import record_to_json
    from lagwatch.shared.records.offsets_codec import CodecError, decode_record

    key = _hex(args.key_hex, "key")
    value = None if args.value_hex is None else _hex(args.value_hex, "value")
    with _input_errors(CodecError, prefix="cannot decode: "):
        record = decode_record(key, value)
    print(json.dumps(record_to_json(record), indent=2))
    return 0


def _hex(text: str, what: str) -> bytes:
    try:
        return bytes.fromhex(text.strip().removeprefix("0x"))
    except ValueError:
        raise InputError(f"field {what}: not valid hex") from None


def _run_service(args: argparse.Namespace) -> int:
    from lagwatch.shared.runtime.config import ConfigError
    from lagwatch.shared.runtime.listen import ListenError
    from lagwatch.shared.runtime.log_format import configure_logging
    from lagwatch.shared.runtime.log_throttle import throttle_kafka_client_logs

    try:
        configure_logging(args.log_level, args.log_file)  # one line per record, whatever names a record quotes
    except OSError as exc:  # a folder that does not exist, or is not writable
        raise InputError(f"--log-file: cannot write {args.log_file}: {exc.strerror}") from None
    throttle_kafka_client_logs()  # a broker outage: aiokafka's same line a hundred times a second, thinned
    if args.workers is not None and (args.service != "ingest" or args.workers < 0):
        raise InputError("--workers: the ingest's worker processes, 0 or more (0: one per CPU but one)")
    if args.http_port is not None and not 0 <= args.http_port <= 65535:
        raise InputError(f"--http-port: not a port (0-65535), got {args.http_port}")
    # the api serves every cluster: none to choose
    config, cluster = (_config(args), "") if args.service == "api" else _config_and_cluster(args)
    host, port, options = _listen_address(args, config)
    _check_listen(host, port, options)
    try:  # Kafka login settings are checked as the clients are built (a keytab, a region, the gssapi package)
        with _input_errors(ConfigError):
            return _start(args, config, cluster)
    except ListenError as exc:  # the port was taken after the check, before the service bound it
        raise InputError(_listen_failure(host, port, options, exc.reason)) from None


# Where each service listens (the api's own port, the others' /healthz, /readyz, /metrics): section and options
_LISTENERS = {
    "api": ("api", "host", "port"),
    "ingest": ("ingest", "http-host", "http-port"),
    "evaluator": ("evaluator", "http-host", "http-port"),
    "notifier": ("notifier", "http-host", "http-port"),
    "archiver": ("history", "http-host", "http-port"),
}


def _listen_address(args: argparse.Namespace, config) -> tuple[str, int, str]:
    """(host, port, the options that set them) of the service's HTTP server, as the service will pick them."""
    section, host_option, port_option = _LISTENERS[args.service]
    settings = getattr(config, section)
    host = getattr(settings, host_option.replace("-", "_"))
    if args.http_port is not None:
        return host, args.http_port, f"{section}.{host_option} / --http-port"
    return host, getattr(settings, port_option.replace("-", "_")), f"{section}.{host_option} / {section}.{port_option}"


def _check_listen(host: str, port: int, options: str) -> None:
    """Bind the service's address once, before the service starts: a host that does not resolve or is not this
    machine's, or a port in use, is one line naming the options, not a traceback from deep in the start-up (the
    services bind after connecting to Redis and Kafka). Bound as asyncio's servers bind, then released."""
    import socket

    try:
        addresses = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _, address in addresses:
            try:
                sock = socket.socket(family, kind, proto)
            except OSError:  # a family this host lacks (no IPv6): asyncio skips it too
                continue
            with sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
    except OSError as exc:
        raise InputError(_listen_failure(host, port, options, exc.strerror or str(exc))) from None


def _listen_failure(host: str, port: int, options: str, reason: str) -> str:
    return f"cannot listen on {host}:{port} ({options}): {reason}"


def _start(args: argparse.Namespace, config, cluster: str) -> int:
    """`lagwatch run <service>`: each imports only its own (a supervisor of ingest workers imports no client)."""
    if args.service == "ingest":
        from lagwatch.services.ingest import workers

        count = (config.ingest.workers if args.workers is None else args.workers) or workers.default_workers()
        if count > 1:
            return workers.supervise(args.argv, count)  # a small process: it imports none of the worker's clients
        workers.die_with_supervisor()
        workers.tune_malloc()
    run = getattr(importlib.import_module(f"lagwatch.services.{args.service}.service"), f"run_{args.service}")
    if args.service == "api":  # every cluster, on its own port
        asyncio.run(run(config, port=args.http_port))
    elif args.service == "archiver":
        from lagwatch.shared.records.history_files import HistoryRootUnavailable

        try:
            asyncio.run(run(config, cluster, http_port=args.http_port))
        except HistoryRootUnavailable as exc:  # it opens its filesystem as it starts
            raise StartError(f"archiver: cannot open history.path: {exc}") from None
    else:  # the notifier checks its subscriptions as it starts
        asyncio.run(run(config, cluster, http_port=args.http_port))
    return 0


def _check_kafka(args: argparse.Namespace) -> int:
    """One JSON line on stdout when the cluster answers; else one line on stderr and exit code 1."""
    from lagwatch.kafka_check import CheckError, check_cluster
    from lagwatch.shared.runtime.config import ConfigError

    if not 0 < args.timeout < math.inf:  # librdkafka waits forever for a negative one
        raise InputError(f"--timeout: seconds, more than 0, got {args.timeout:g}")
    config, name = _config_and_cluster(args)
    try:
        with _input_errors(ConfigError):  # login settings, checked as the client is built
            report = check_cluster(config.cluster(name), name, args.timeout)
    except CheckError as exc:
        raise StartError(str(exc)) from None
    print(json.dumps(report))
    return 0


def _config_check(args: argparse.Namespace) -> int:
    """A summary (or, with --show, the effective configuration as YAML) on stdout, warnings on stderr; every problem
    found on stderr, one per line, and exit code 2."""
    import os

    import yaml

    from lagwatch import config_check

    config = _config(args)  # the loader stops at the first bad value: what follows it is not read
    found = config_check.check(config)
    for problem in found.problems:
        print(f"lagwatch: {problem}", file=sys.stderr)
    for warning in found.warnings:
        print(f"lagwatch: warning: {warning}", file=sys.stderr)
    if found.problems:
        return USAGE_ERROR
    read_from = f"read from {config_check.sources(str(args.config) if args.config else None, os.environ)}"
    if args.show:  # YAML that loads again: the rest as comments
        print(f"# {read_from}; credentials masked\n# {config_check.verdict(config, found)}")
        print(yaml.safe_dump(config_check.effective(config), sort_keys=False), end="")
    else:
        print("\n".join([read_from, *config_check.summary(config), config_check.verdict(config, found)]))
    return 0


def _forget_cluster(args: argparse.Namespace) -> int:
    """One JSON line: what was (with --dry-run: would be) deleted. Refused while the configuration still names the
    cluster (its services would write it back) or an ingest worker still polls it."""
    from lagwatch.shared.runtime.config import cluster_name_problem

    config = _config(args)
    if problem := cluster_name_problem(args.cluster):
        raise InputError(problem)
    if args.cluster in config.clusters:
        raise InputError(
            f"cluster {args.cluster!r} is still configured: remove it from the configuration and stop its services"
        )
    from redis.exceptions import RedisError

    from lagwatch.shared.runtime.cluster_forgetting import StillRunning, forget_cluster

    try:
        data = asyncio.run(forget_cluster(config.redis, args.cluster, dry_run=args.dry_run))
    except StillRunning as exc:
        raise StartError(str(exc)) from None
    except (RedisError, OSError) as exc:
        raise StartError(f"Redis: {exc}") from None
    summary = {"groups": data.groups, "topics": data.topics, "keys": data.keys}
    print(json.dumps({"cluster": args.cluster, "dry_run": args.dry_run, **summary}))
    return 0


def _notify_replay_dlq(args: argparse.Namespace) -> int:
    from lagwatch.services.notifier.dlq import parse_since, replay_from_topic

    with _input_errors(ValueError):  # a configuration's (ConfigError is one) or --since's
        config, cluster = _config_and_cluster(args)
        since_ms = parse_since(args.since) if args.since else None
    print(json.dumps(asyncio.run(replay_from_topic(config, cluster, args.subscription, since_ms))))
    return 0


def _notify_test(args: argparse.Namespace) -> int:
    """One JSON line: each notification sent and its receiver's answer; exit code 1 unless every one was taken."""
    from lagwatch.shared.notifications.templating.template_worker import WORKERS
    from lagwatch.shared.runtime.config import ConfigError, cluster_name_problem

    if args.cluster is not None and (problem := cluster_name_problem(args.cluster)):
        raise InputError(f"--cluster: {problem}")
    try:
        config = _config(args)
        with _input_errors(ConfigError):  # a subscription of the file the notifier would refuse
            report = asyncio.run(_send_test(config, args.subscription, args.cluster, args.sample))
    finally:
        WORKERS.close()  # templates render in worker processes: they would outlive the command
    print(json.dumps(report))
    return 0 if all(sent["ok"] for sent in report["sent"]) else START_FAILED


async def _send_test(config, subscription_id: str, cluster: str | None, sample: str) -> dict:
    """The configuration file's subscription, else the api's (from Redis), sent a sample incident."""
    from redis.exceptions import RedisError

    from lagwatch.services.notifier.sample import NoSuchAlerts, sample_report
    from lagwatch.services.notifier.subscriptions import NoSuchSubscription, find_subscription
    from lagwatch.shared.runtime.clock import now_ms

    try:
        subscription = await find_subscription(config, subscription_id)
    except NoSuchSubscription as exc:
        raise InputError(str(exc)) from None
    except (RedisError, OSError) as exc:
        raise StartError(
            f"subscription {subscription_id!r} is not in the configuration file, and Redis (the api's) failed: {exc}"
        ) from None
    with _input_errors(NoSuchAlerts):
        return await sample_report(subscription, config.notifier, cluster, list(config.clusters), now_ms(), sample)


def _migrate_burrow_config(args: argparse.Namespace) -> int:
    """The YAML on stdout; what is not carried over, or changes meaning, as warnings on stderr."""
    from lagwatch.burrow_config import migrate_file
    from lagwatch.shared.runtime.config import Config, ConfigError, build_section

    try:
        migration = migrate_file(args.burrow_toml, args.templates)
    except OSError as exc:
        raise InputError(f"cannot read {args.burrow_toml}: {exc.strerror}") from None
    except ValueError as exc:
        raise InputError(str(exc)) from None
    try:
        build_section(Config, migration.config)
    except ConfigError as exc:  # a value Burrow took that lagwatch refuses (a regex, say): the user must see it
        migration.warnings.append(f"the result does not load as it is: {exc}")
    print(migration.yaml(args.burrow_toml.name), end="")
    for warning in migration.warnings:
        print(f"lagwatch: warning: {warning}", file=sys.stderr)
    return 0


def _spark_reprocess(job_args: list[str]) -> int:
    try:
        from lagwatch.spark import reprocess
    except ImportError as exc:  # pyspark, pandas or pyarrow missing
        print(f"lagwatch: the Spark job needs the spark extra (pip install 'lagwatch[spark]'): {exc}", file=sys.stderr)
        return USAGE_ERROR
    try:
        return reprocess.main(job_args)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code or 0)


def _dev_up(args: argparse.Namespace) -> int:
    try:
        from lagwatch.devkit.demo_system import run_demo
        from lagwatch.devkit.stack import run_local_stack
    except ImportError as exc:  # an installed wheel or image: the dev kit ships only with a checkout
        raise InputError(
            f"`dev up` needs the dev kit, in a checkout's editable install (pip install -e .): {exc}"
        ) from None
    if args.no_demo:
        run_local_stack(args.state_dir, redis_port=args.redis_port, kafka_port=args.kafka_port)
        return 0
    return run_demo(args.state_dir, redis_port=args.redis_port, kafka_port=args.kafka_port, api_port=args.api_port)


if __name__ == "__main__":
    sys.exit(main())

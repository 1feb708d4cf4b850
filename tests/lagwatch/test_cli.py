"""The `lagwatch` command's contracts, run as a real subprocess."""

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from lagwatch.devkit import offsets_encoders as encoders
from lagwatch.shared.records.offsets_codec import GroupMember
from tests import paths

SEEDS = json.loads((paths.DATA / "seed_examples.json").read_text())["cases"]
LAGWATCH = shutil.which("lagwatch", path=str(Path(sys.executable).parent)) or "lagwatch"


def lagwatch(*args, stdin="", env=None):
    environment = {**os.environ, **(env or {})}
    return subprocess.run([LAGWATCH, *args], input=stdin, capture_output=True, text=True, timeout=60, env=environment)


def one_line_error(result):
    """The command failed as the project's standard says: one line on stderr, no traceback."""
    assert "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    return result.stderr


@pytest.mark.parametrize("case", SEEDS, ids=[c["name"] for c in SEEDS])
def test_rules_eval_answers_every_seed_example(case):
    result = lagwatch("rules", "eval", stdin=json.dumps(case["request"]))
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["status"] == case["expect"]["status"]
    assert [p["status"] for p in answer["partitions"]] == [p["status"] for p in case["expect"]["partitions"]]
    assert set(answer) == {
        "cluster",
        "group",
        "status",
        "complete",
        "partition_count",
        "totallag",
        "maxlag",
        "partitions",
    }
    assert set(answer["partitions"][0]) == {"topic", "partition", "status", "start", "end", "current_lag", "complete"}


def test_rules_eval_reads_a_file(tmp_path):
    request = tmp_path / "request.json"
    request.write_text(json.dumps(SEEDS[1]["request"]))
    answer = json.loads(lagwatch("rules", "eval", "--file", str(request)).stdout)
    assert (answer["status"], answer["totallag"], answer["maxlag"]["current_lag"]) == ("ERR", 3, 3)
    assert answer["partitions"][0]["start"] == {"offset": 10, "timestamp": 1700000000000, "observedAt": None, "lag": 1}


@pytest.mark.parametrize(
    ("stdin", "says"),
    [
        ("not json", "not valid JSON"),
        ("[]", "request: expected an object"),
        (
            '{"now_ms": 1, "cluster": "c", "group": "g", "partitions": [{"topic": "t", "partition": 0}]}',
            "partitions[0].offsets",
        ),
        ('{"now_ms": "soon", "cluster": "c", "group": "g", "partitions": []}', "now_ms"),
        (
            '{"now_ms": 1, "cluster": "c", "group": "g", "partitions": [{"topic": "t", "partition": 0, '
            '"offsets": [{"offset": 1, "timestamp": 1, "lag": -3}]}]}',
            "partitions[0].offsets[0].lag",
        ),
    ],
)
def test_rules_eval_rejects_bad_input_with_exit_code_2_and_one_line(stdin, says):
    result = lagwatch("rules", "eval", stdin=stdin)
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert says in result.stderr


def test_offsets_decode_an_offset_commit():
    key = encoders.encode_offset_commit_key("billing", "orders", 3).hex()
    value = encoders.encode_offset_commit_value(42, 1700000000000, metadata="m", leader_epoch=7, version=3).hex()
    result = lagwatch("offsets", "decode", key, value)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) | {"tombstone": False} == {
        "kind": "offset_commit",
        "key_version": 1,
        "value_version": 3,
        "group": "billing",
        "topic": "orders",
        "partition": 3,
        "offset": 42,
        "leader_epoch": 7,
        "metadata": "m",
        "commit_timestamp": 1700000000000,
        "expire_timestamp": None,
        "tombstone": False,
    }


def test_offsets_decode_group_metadata_and_a_tombstone():
    member = GroupMember(
        "m-1",
        "static-1",
        "client-a",
        "/10.0.0.7",
        300000,
        45000,
        encoders.encode_subscription(["orders"]),
        encoders.encode_assignment({"orders": [0, 2]}),
    )
    value = encoders.encode_group_metadata_value(generation=5, protocol="range", leader="m-1", members=[member])
    key = encoders.encode_group_metadata_key("billing").hex()
    decoded = json.loads(lagwatch("offsets", "decode", key, value.hex()).stdout)
    assert (decoded["kind"], decoded["generation"], decoded["leader"]) == ("group_metadata", 5, "m-1")
    assert decoded["members"][0] | {} == {
        "member_id": "m-1",
        "group_instance_id": "static-1",
        "client_id": "client-a",
        "client_host": "/10.0.0.7",
        "session_timeout": 45000,
        "rebalance_timeout": 300000,
        "assignment": {"orders": [0, 2]},
    }
    tombstone = json.loads(lagwatch("offsets", "decode", key).stdout)
    assert tombstone["tombstone"] is True and tombstone["group"] == "billing"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["zz"], "key: not valid hex"),
        (["0001"], "key."),
        ([encoders.encode_offset_commit_key("g", "t", 0).hex(), "0003000000"], "value."),
    ],
)
def test_offsets_decode_names_the_field_that_failed(args, says):
    result = lagwatch("offsets", "decode", *args)
    assert result.returncode == 2
    assert says in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_python_dash_m_lagwatch_is_the_lagwatch_command():
    result = subprocess.run(
        [sys.executable, "-m", "lagwatch", "rules", "eval"],
        input='{"intervals": 3, "offsets": [], "lags": []}',
        capture_output=True,
        text=True,
        timeout=60,
    )
    command = shutil.which("lagwatch") or str(Path(sys.executable).parent / "lagwatch")
    same = subprocess.run(
        [command, "rules", "eval"], input='{"intervals": 3, "offsets": [], "lags": []}', capture_output=True, text=True
    )
    assert (result.returncode, result.stdout) == (same.returncode, same.stdout)
    assert result.stdout or result.stderr


@pytest.mark.parametrize("group", ["rules", "offsets", "notify", "migrate", "spark", "dev"])
def test_a_command_group_alone_prints_its_own_help_and_exit_code_2(group):
    """`lagwatch dev` lists `up`, not every top-level command."""
    result = lagwatch(group)
    assert result.returncode == 2 and result.stderr.startswith(f"usage: lagwatch {group} ")
    assert f"{group} commands:" in result.stderr


@pytest.mark.parametrize(
    "args", [["api", "--workers", "2"], ["evaluator", "--workers", "1"], ["ingest", "--workers", "-1"]]
)
def test_run_refuses_workers_for_a_service_without_them_or_below_zero(args):
    """Only the ingest runs worker processes; a count the command would ignore, or a negative one, is an error."""
    result = lagwatch("run", *args)
    assert result.returncode == 2
    assert "--workers" in result.stderr and len(result.stderr.strip().splitlines()) == 1


A_CLUSTER = {"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9"}  # configured, never reached: these runs stop before Kafka


@pytest.mark.parametrize(
    ("service", "env", "says"),
    [
        ("ingest", {"LAGWATCH__STORAGE__EXPIRE_GROUP": "1" + "0" * 30}, "config storage.expire-group: must be <="),
        ("api", {"LAGWATCH__REDIS__URL": "http://nope"}, "config redis.url: must be a redis://"),
        ("archiver", {"LAGWATCH__HISTORY__PATH": "bogus://x"}, "config history.path: unknown filesystem 'bogus'"),
        ("ingest", {"KAFKA_BOOTSTRAP_SERVERS": ",,"}, "config clusters.local.bootstrap-servers: must list"),
    ],
)
def test_run_stops_at_a_bad_value_with_one_line_naming_the_key(service, env, says):
    result = lagwatch("run", service, env={**A_CLUSTER, **env})
    assert result.returncode == 2
    assert says in one_line_error(result)


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (["api"], {"LAGWATCH__API__HOST": "no.such.host.invalid"}, "no.such.host.invalid:8000 (api.host / api.port)"),
        (
            ["ingest", "--workers", "1"],
            {"LAGWATCH__INGEST__HTTP_HOST": "999.1.1.1"},
            "999.1.1.1:8001 (ingest.http-host / ingest.http-port)",
        ),
        (["evaluator"], {"LAGWATCH__EVALUATOR__HTTP_HOST": "192.0.2.1"}, "192.0.2.1:8002 (evaluator.http-host / "),
    ],
)
def test_run_names_a_listen_address_it_cannot_use(args, env, says):
    """A host that does not resolve, or is not this machine's (192.0.2.1: TEST-NET-1), before any other start-up."""
    result = lagwatch("run", *args, env={**A_CLUSTER, **env})
    assert result.returncode == 2
    assert f"lagwatch: cannot listen on {says}" in one_line_error(result)


def test_run_names_a_port_already_in_use():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        notifier = lagwatch("run", "notifier", env={**A_CLUSTER, "LAGWATCH__NOTIFIER__HTTP_PORT": str(port)})
        api = lagwatch("run", "api", "--http-port", str(port), env=A_CLUSTER)
    assert (notifier.returncode, api.returncode) == (2, 2)
    assert f"127.0.0.1:{port} (notifier.http-host / notifier.http-port): " in one_line_error(notifier)
    assert f"127.0.0.1:{port} (api.host / --http-port): " in one_line_error(api)


# `lagwatch run` with its check of the listen address skipped: as if the port were taken just after the check
UNCHECKED_RUN = "import sys, lagwatch.cli as cli; cli._check_listen = lambda *a: None; sys.exit(cli.main(sys.argv[1:]))"


@pytest.mark.parametrize("service", ["api", "ingest", "evaluator", "notifier", "archiver"])
def test_a_port_taken_after_the_check_is_said_as_the_check_says_it(service, tmp_path):
    """Another process can take the port between the check and the service's bind (the services bind after their
    clients are built): the bind's failure is the same line as the check's and exit code 2, not a traceback, and
    the service closes what it had opened."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = subprocess.run(
            [sys.executable, "-c", UNCHECKED_RUN, "run", service, "--http-port", port],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **A_CLUSTER, "LAGWATCH__HISTORY__PATH": str(tmp_path)},
        )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "Unclosed" not in result.stderr, result.stderr
    said = result.stderr.strip().splitlines()[-1]  # after what the service said as it started (Kafka is away)
    assert said.startswith(f"lagwatch: cannot listen on 127.0.0.1:{port} ("), said
    assert said.endswith("--http-port): Address already in use"), said


def test_run_refuses_an_http_port_out_of_range():
    result = lagwatch("run", "api", "--http-port", "70000", env=A_CLUSTER)
    assert result.returncode == 2
    assert "--http-port: not a port" in one_line_error(result)


def test_archiver_that_cannot_open_its_filesystem_exits_1_with_one_line():
    """Not the user's input (the path is well-formed), so exit code 1: here libhdfs is missing or nothing listens."""
    env = {**A_CLUSTER, "LAGWATCH__HISTORY__PATH": "hdfs://127.0.0.1:9/lagwatch", "LAGWATCH__HISTORY__HTTP_PORT": "0"}
    result = lagwatch("run", "archiver", env=env)
    assert result.returncode == 1
    assert "lagwatch: archiver: cannot open history.path: " in one_line_error(result)


def test_check_kafka_that_gets_no_answer_says_why_in_one_line():
    """librdkafka logs a line per connection attempt on stderr unless given a logger: none of them shows; the
    brokers' own reason is in the one line."""
    down = {"LAGWATCH__CLUSTERS__down__BOOTSTRAP_SERVERS": "127.0.0.1:9"}
    result = lagwatch("check-kafka", "--timeout", "1", env=down)
    assert result.returncode == 1 and not result.stdout
    assert "cluster down: no answer within 1 s" in one_line_error(result) and "Connection refused" in result.stderr


@pytest.mark.parametrize("timeout", ["-1", "0", "nan"])
def test_check_kafka_refuses_a_timeout_that_is_not_a_wait(timeout):
    """-1 is librdkafka's "forever": the command would hang on a cluster that does not answer."""
    result = subprocess.run(
        [LAGWATCH, "check-kafka", "--timeout", timeout],
        capture_output=True,
        text=True,
        timeout=20,
        env={**os.environ, "LAGWATCH__CLUSTERS__down__BOOTSTRAP_SERVERS": "127.0.0.1:9"},
    )
    assert result.returncode == 2
    assert "--timeout: seconds, more than 0" in one_line_error(result)


@pytest.mark.parametrize("where", ["no/such/folder/lagwatch.log", "."])
def test_run_names_a_log_file_it_cannot_write(tmp_path, where):
    result = lagwatch("run", "evaluator", "--log-file", str(tmp_path / where), env=A_CLUSTER)
    assert result.returncode == 2
    assert "lagwatch: --log-file: cannot write " in one_line_error(result)


@pytest.mark.parametrize("option", ["--api-port", "--redis-port", "--kafka-port"])
def test_dev_up_refuses_a_port_out_of_range_before_starting_anything(tmp_path, option):
    result = lagwatch("dev", "up", "--state-dir", str(tmp_path), option, "70000")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"argument {option}: not a port (0-65535): '70000'" in result.stderr

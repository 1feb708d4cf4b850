"""The `lagwatch` command's contracts, run as a real subprocess."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lagwatch.shared.kafka import offsets_codec as codec
from tests import paths

SEEDS = json.loads((paths.DATA / "seed_examples.json").read_text())["cases"]
LAGWATCH = shutil.which("lagwatch", path=str(Path(sys.executable).parent)) or "lagwatch"


def lagwatch(*args, stdin=""):
    return subprocess.run([LAGWATCH, *args], input=stdin, capture_output=True, text=True, timeout=60)


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
    key = codec.encode_offset_commit_key("billing", "orders", 3).hex()
    value = codec.encode_offset_commit_value(42, 1700000000000, metadata="m", leader_epoch=7, version=3).hex()
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
    member = codec.GroupMember(
        "m-1",
        "static-1",
        "client-a",
        "/10.0.0.7",
        300000,
        45000,
        codec.encode_subscription(["orders"]),
        codec.encode_assignment({"orders": [0, 2]}),
    )
    value = codec.encode_group_metadata_value(generation=5, protocol="range", leader="m-1", members=[member])
    key = codec.encode_group_metadata_key("billing").hex()
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
        ([codec.encode_offset_commit_key("g", "t", 0).hex(), "0003000000"], "value."),
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


@pytest.mark.parametrize(
    "args", [["api", "--workers", "2"], ["evaluator", "--workers", "1"], ["ingest", "--workers", "-1"]]
)
def test_run_refuses_workers_for_a_service_without_them_or_below_zero(args):
    """Only the ingest runs worker processes; a count the command would ignore, or a negative one, is an error."""
    result = lagwatch("run", *args)
    assert result.returncode == 2
    assert "--workers" in result.stderr and len(result.stderr.strip().splitlines()) == 1

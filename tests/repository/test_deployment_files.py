"""docker-compose.yml cannot run here (no Docker engine), so it is validated offline against the Compose spec,
and checked for what lagwatch needs: every lagwatch service is `lagwatch run <service>` of a known service."""

import re

import yaml
from compose_spec import PyCompose

from tests import paths

ROOT = paths.ROOT
SERVICES = {"ingest", "evaluator", "notifier", "api", "archiver"}


class _NoAliases(yaml.SafeDumper):
    def ignore_aliases(self, data):
        return True


def interpolated(text: str) -> str:
    """`${VAR:-default}` as docker compose resolves it with VAR unset (the validator does not interpolate)."""
    return re.sub(r"\$\{\w+:-([^}]*)\}", lambda m: m.group(1), text)


def test_compose_file_follows_the_compose_spec():
    # Variables and YAML merge keys (`<<`) are resolved first, as docker compose does; the validator reads the result.
    doc = yaml.safe_load(interpolated((ROOT / "docker-compose.yml").read_text()))
    resolved = yaml.dump({k: v for k, v in doc.items() if not k.startswith("x-")}, Dumper=_NoAliases)
    compose = PyCompose.from_yaml(resolved)
    compose.validate()
    assert {"kafka", "redis", "ingest", "evaluator", "notifier", "api", "archiver", "spark", "topics"} <= set(
        compose.service_names()
    )


def test_lagwatch_services_run_a_real_service_against_kafka_and_redis():
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    for name, service in doc["services"].items():
        if service.get("image") != "lagwatch:latest":
            continue
        assert service["command"][:2] == ["run", name] and name in SERVICES
        assert service["healthcheck"]["test"][-1].endswith("/readyz')")
        assert service["environment"]["KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092"
        assert set(service["depends_on"]) == {"kafka", "redis"}


def test_redis_keeps_its_data_across_restarts():
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert "--appendonly" in doc["services"]["redis"]["command"]
    assert any(v.endswith(":/data") for v in doc["services"]["redis"]["volumes"])


def test_dockerfile_installs_the_project_and_runs_the_lagwatch_command():
    text = (ROOT / "Dockerfile").read_text()
    assert "pip install" in text and 'ENTRYPOINT ["lagwatch"]' in text
    for folder in ("lagwatch", "shared", "services", "spark"):
        assert f"COPY {folder} ./{folder}" in text


def test_the_validator_does_reject_a_broken_compose_file():
    import pytest

    broken = "services:\n  ingest:\n    image: lagwatch:latest\n    restart: sometimes\n    portz: [8001]\n"
    with pytest.raises(ValueError):
        PyCompose.from_yaml(broken).validate()


def test_the_spark_replay_is_a_one_shot_job_over_the_archivers_files():
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    spark, archiver = doc["services"]["spark"], doc["services"]["archiver"]

    assert spark["restart"] == "no" and spark["profiles"] == ["replay"]
    assert spark["command"][:2] == ["spark", "reprocess"]
    assert spark["build"]["target"] == "spark" and "FROM services AS spark" in (ROOT / "Dockerfile").read_text()
    history_root = archiver["environment"]["LAGWATCH__HISTORY__PATH"]
    assert spark["command"][spark["command"].index("--input") + 1] == history_root
    assert any(v.split(":")[1] == history_root for v in spark["volumes"])
    assert doc["services"]["ingest"]["environment"]["LAGWATCH__HISTORY__ENABLED"] == "true"
    assert "--topic lagwatch.history" in doc["services"]["topics"]["command"][0]

"""deploy/kubernetes/: the kustomize base and the example overlay, rendered with `kubectl kustomize` and checked
against the Kubernetes schemas (`kubernetes-validate`, strict: an unknown field fails). The Prometheus Operator's
ServiceMonitor, PodMonitor and PrometheusRule are custom resources without a schema here: their shape is checked
instead (the PrometheusRule holds deploy/prometheus/lagwatch-rules.yml, which promtool tests). Also
checked against lagwatch itself: each Deployment runs a command the real CLI accepts, its ports and probes are the
ones its service's configuration (the ConfigMap's file, loaded by lagwatch) gives, and each has a disruption budget.
"""

import base64
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from lagwatch.cli import _parser
from lagwatch.shared.runtime.config import load_config
from tests import paths

ROOT = paths.ROOT
KUSTOMIZE = ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.32.0"  # the kubectl here; the manifests use only long-stable APIs
SERVICES = {"ingest", "evaluator", "notifier", "api", "archiver"}
CRDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}


def render(path: Path) -> list[dict]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is missing"
    result = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


@pytest.fixture(scope="module", params=["base", "overlays/example"])
def rendered(request) -> list[dict]:
    return render(KUSTOMIZE / request.param)


def by_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def container(deployment: dict) -> dict:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only


def matches(selector: dict, labels: dict) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    return all(
        labels.get(e["key"]) in e["values"] if e["operator"] == "In" else e["key"] not in labels
        for e in selector.get("matchExpressions", [])
    )


def lagwatch_config(docs: list[dict], tmp_path: Path):
    (config_map,) = by_kind(docs, "ConfigMap").values()
    path = tmp_path / "lagwatch.yaml"
    path.write_text(config_map["data"]["lagwatch.yaml"])
    return load_config(path, env={"REDIS_URL": "redis://redis:6379/0"})


def test_every_resource_but_the_monitors_passes_the_kubernetes_schemas(rendered):
    kinds = {d["kind"] for d in rendered}
    assert {"Deployment", "PodDisruptionBudget", "ConfigMap", "Secret", "Service"} | CRDS <= kinds
    for doc in rendered:
        if doc["kind"] in CRDS:
            continue
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_validator_rejects_a_broken_deployment(rendered):
    deployment = next(iter(by_kind(rendered, "Deployment").values()))
    broken = yaml.safe_load(yaml.safe_dump(deployment))
    container(broken)["readinessProbe"]["httpGet"]["pathh"] = "/readyz"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_one_deployment_per_service_running_a_command_the_cli_accepts(rendered):
    deployments = by_kind(rendered, "Deployment")
    assert {d["metadata"]["labels"]["app.kubernetes.io/component"] for d in deployments.values()} == SERVICES
    for deployment in deployments.values():
        service = deployment["metadata"]["labels"]["app.kubernetes.io/component"]
        args = _parser().parse_args(container(deployment)["args"])
        assert (args.handler.__name__, args.service) == ("_run_service", service)
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert matches(deployment["spec"]["selector"], labels)


def test_probes_and_ports_are_the_ones_each_services_configuration_serves(rendered, tmp_path):
    config = lagwatch_config(rendered, tmp_path)
    ports = {
        "ingest": (config.ingest.http_host, config.ingest.http_port),
        "evaluator": (config.evaluator.http_host, config.evaluator.http_port),
        "notifier": (config.notifier.http_host, config.notifier.http_port),
        "api": (config.api.host, config.api.port),
        "archiver": (config.history.http_host, config.history.http_port),
    }
    for deployment in by_kind(rendered, "Deployment").values():
        service = deployment["metadata"]["labels"]["app.kubernetes.io/component"]
        pod = container(deployment)
        host, port = ports[service]
        assert host == "0.0.0.0"  # reachable by the kubelet's probes and Prometheus, not only from inside the pod
        (declared,) = pod["ports"]
        assert declared["containerPort"] == port
        assert pod["startupProbe"]["httpGet"] == {"path": "/healthz", "port": declared["name"]}
        assert pod["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": declared["name"]}
        assert pod["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": declared["name"]}
        assert {"cpu", "memory"} <= set(pod["resources"]["requests"]) and "memory" in pod["resources"]["limits"]


def test_config_comes_from_the_config_map_and_tokens_from_the_secret(rendered, tmp_path):
    lagwatch_config(rendered, tmp_path)  # lagwatch itself accepts the file
    (config_map,) = by_kind(rendered, "ConfigMap")
    (secret_name,) = by_kind(rendered, "Secret")
    secret = by_kind(rendered, "Secret")[secret_name]
    secret_keys = set(secret.get("stringData", {})) | set(secret.get("data", {}))
    for deployment in by_kind(rendered, "Deployment").values():
        pod_spec = deployment["spec"]["template"]["spec"]
        pod = container(deployment)
        env = {e["name"]: e for e in pod["env"]}
        mounts = {m["name"]: m["mountPath"] for m in pod["volumeMounts"]}
        volumes = {v["name"]: v for v in pod_spec["volumes"]}
        config_volume = next(name for name, v in volumes.items() if v.get("configMap", {}).get("name") == config_map)
        assert env["LAGWATCH_CONFIG"]["value"] == f"{mounts[config_volume]}/lagwatch.yaml"
        assert env["REDIS_URL"]["valueFrom"]["secretKeyRef"]["name"] == secret_name
        refs = [e["valueFrom"]["secretKeyRef"] for e in pod["env"] if "valueFrom" in e]
        assert all(r["name"] == secret_name and r["key"] in secret_keys for r in refs)
        if deployment["metadata"]["labels"]["app.kubernetes.io/component"] == "api":
            assert env["LAGWATCH__API__TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "api-token"
        assert pod["securityContext"]["readOnlyRootFilesystem"] and "/tmp" in mounts.values()


def test_each_deployment_has_a_disruption_budget(rendered):
    budgets = by_kind(rendered, "PodDisruptionBudget").values()
    for deployment in by_kind(rendered, "Deployment").values():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        (budget,) = [b for b in budgets if matches(b["spec"]["selector"], labels)]
        assert (
            budget["spec"].get("maxUnavailable") == 1
            or budget["spec"].get("minAvailable", 0) < deployment["spec"]["replicas"]
        )


def test_the_api_service_and_the_monitors_reach_the_metrics(rendered):
    deployments = {
        d["metadata"]["labels"]["app.kubernetes.io/component"]: d for d in by_kind(rendered, "Deployment").values()
    }
    (service,) = by_kind(rendered, "Service").values()
    api_pod = deployments["api"]["spec"]["template"]["metadata"]["labels"]
    assert matches({"matchLabels": service["spec"]["selector"]}, api_pod)
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] == container(deployments["api"])["ports"][0]["name"]

    (monitor,) = by_kind(rendered, "ServiceMonitor").values()
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert matches(monitor["spec"]["selector"], service["metadata"]["labels"])
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == port["name"] and endpoint["path"] == "/metrics"
    assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout"}

    (pods,) = by_kind(rendered, "PodMonitor").values()
    assert pods["apiVersion"] == "monitoring.coreos.com/v1"
    scraped = {
        name
        for name, d in deployments.items()
        if matches(pods["spec"]["selector"], d["spec"]["template"]["metadata"]["labels"])
    }
    assert scraped == SERVICES - {"api"}
    (pod_endpoint,) = pods["spec"]["podMetricsEndpoints"]
    assert pod_endpoint["path"] == "/metrics"
    assert all(container(deployments[name])["ports"][0]["name"] == pod_endpoint["port"] for name in scraped)


def test_the_prometheus_rule_holds_the_rules_file_as_it_is(rendered):
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "prometheus_rule_manifest.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    (rule,) = by_kind(rendered, "PrometheusRule").values()
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and set(rule["spec"]) == {"groups"}
    rules_file = yaml.safe_load((ROOT / "deploy" / "prometheus" / "lagwatch-rules.yml").read_text())
    assert rule["spec"]["groups"] == rules_file["groups"]


def test_the_health_ports_match_docker_compose():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    deployments = by_kind(render(KUSTOMIZE / "base"), "Deployment")
    for name in SERVICES:
        port = container(deployments[f"lagwatch-{name}"])["ports"][0]["containerPort"]
        assert f"127.0.0.1:{port}/readyz" in compose["services"][name]["healthcheck"]["test"][-1]


def test_the_example_overlay_sets_namespace_image_replicas_config_and_secret(tmp_path):
    docs = render(KUSTOMIZE / "overlays" / "example")
    assert all(d["metadata"].get("namespace") == "lagwatch" for d in docs if d["kind"] != "Namespace")
    deployments = by_kind(docs, "Deployment")
    assert {container(d)["image"] for d in deployments.values()} == {"registry.example.com/lagwatch:1.0.0"}
    assert deployments["lagwatch-evaluator"]["spec"]["replicas"] == 3
    (secret,) = by_kind(docs, "Secret").values()  # replaced from the env file
    assert secret["metadata"]["name"].startswith("lagwatch-secrets-")
    values = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert values["api-token"] == "change-me-to-a-long-random-string" and values["redis-url"].startswith("redis://")
    assert list(lagwatch_config(docs, tmp_path).clusters) == ["prod"]


def test_the_ingests_worker_count_does_not_follow_the_nodes_cpus(rendered, tmp_path):
    """`ingest.workers: 0` starts one worker per CPU but one, and without a CPU limit those are the node's: 31 on a
    32-CPU node, ~55 MB each before reading anything, past the pod's memory limit."""
    config = lagwatch_config(rendered, tmp_path)
    pod = container(by_kind(rendered, "Deployment")["lagwatch-ingest"])
    workers = _parser().parse_args(pod["args"]).workers
    assert (config.ingest.workers if workers is None else workers) > 0 or "cpu" in pod["resources"]["limits"]


def test_a_changed_configuration_or_token_rolls_every_deployment(tmp_path):
    """The ConfigMap and the Secret are generated with a hash of their content in their names: a change renames
    them, so `kubectl apply -k` rolls the Deployments (the services read both only at start; edited in place,
    replicas would run on different configurations until each happened to restart)."""
    overlay = KUSTOMIZE / "overlays" / "example"
    copy = tmp_path / "overlays" / "example"
    shutil.copytree(KUSTOMIZE / "base", tmp_path / "base")
    shutil.copytree(overlay, copy)

    def mounted() -> tuple[str, str]:
        """(the ConfigMap, the Secret) every Deployment mounts."""
        names = set()
        for deployment in by_kind(render(copy), "Deployment").values():
            pod = deployment["spec"]["template"]["spec"]
            config_maps = {v["configMap"]["name"] for v in pod.get("volumes", []) if "configMap" in v}
            env = container(deployment).get("env", [])
            secrets = {e["valueFrom"]["secretKeyRef"]["name"] for e in env if "secretKeyRef" in e.get("valueFrom", {})}
            names.add((*config_maps, *secrets))
        (only,) = names
        return only

    config, secret = mounted()
    (copy / "lagwatch.yaml").write_text((copy / "lagwatch.yaml").read_text() + "\nstorage:\n  intervals: 12\n")
    new_config, same_secret = mounted()
    (copy / "secrets.env.example").write_text("redis-url=redis://redis:6379/1\napi-token=another-long-token\n")
    assert new_config != config and same_secret == secret
    same_config, new_secret = mounted()
    assert same_config == new_config and new_secret != secret

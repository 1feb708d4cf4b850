"""Writes deploy/kubernetes/base/prometheus-rules.yaml: deploy/prometheus/lagwatch-rules.yml as a PrometheusRule, the
Prometheus Operator's resource for rule files (kustomize cannot read files outside its directory, so the rules are
copied, not referenced).

    python scripts/prometheus_rule_manifest.py            # rewrite the manifest
    python scripts/prometheus_rule_manifest.py --check    # exit 1 when it is out of date (the tests run it)
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus" / "lagwatch-rules.yml"
OUT = ROOT / "deploy" / "kubernetes" / "base" / "prometheus-rules.yaml"
HEADER = (
    "# Written by scripts/prometheus_rule_manifest.py from deploy/prometheus/lagwatch-rules.yml (edit that file, then\n"
    "# run the script): the alert and recording rules for the Prometheus Operator.\n"
)


class _Dumper(yaml.SafeDumper):
    """Multi-line expressions as literal blocks, as the rules file writes them."""


_Dumper.add_representer(
    str,
    lambda dumper, text: dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None),
)


def render() -> str:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    manifest = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "lagwatch", "labels": {"app.kubernetes.io/name": "lagwatch"}},
        "spec": {"groups": groups},
    }
    return HEADER + yaml.dump(manifest, Dumper=_Dumper, sort_keys=False, width=120)


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is out of date: run python scripts/prometheus_rule_manifest.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

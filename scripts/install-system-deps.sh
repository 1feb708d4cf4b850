#!/usr/bin/env bash
# Installs the system packages lagwatch's tests and local demo need, when they are missing:
# redis-server, chromium (headless: the dashboard's browser test and its screenshot), a Java runtime
# (the Spark job: PySpark 4 runs on Java 17 or 21), and Burrow 1.2.1 with ZooKeeper (bench/bench_vs_burrow.py
# measures lagwatch against it; neither runs as a service), Prometheus with promtool and Alertmanager (the alert
# rules' unit tests, the Grafana dashboard's queries run against a real Prometheus; Alertmanager as a notification
# destination), and a C compiler with Python's headers (the install compiles the ingest's record loop,
# services/ingest/commit_pass.pyx) (Debian).
set -euo pipefail

need=()
command -v gcc >/dev/null 2>&1 || need+=(gcc)
python3 -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  || need+=(python3-dev)
command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ] || need+=(redis-server)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
[ -x /usr/bin/Burrow ] || need+=(burrow)
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
{ command -v prometheus && command -v promtool; } >/dev/null 2>&1 || need+=(prometheus)
command -v prometheus-alertmanager >/dev/null 2>&1 || command -v alertmanager >/dev/null 2>&1 \
  || need+=(prometheus-alertmanager)
[ ${#need[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
  echo "lagwatch: please install: ${need[*]} (no apt-get here)" >&2
  exit 1
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "lagwatch: installing ${need[*]} with apt-get" >&2
$sudo apt-get update -qq
# Another install running at the same time holds dpkg's lock: wait for it rather than fail.
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq -o DPkg::Lock::Timeout=300 "${need[@]}" >/dev/null

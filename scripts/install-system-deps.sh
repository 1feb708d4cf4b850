#!/usr/bin/env bash
# Installs the system packages lagwatch's tests and local demo need, when they are missing:
# redis-server, and chromium (headless: the dashboard's browser test and its screenshot) (Debian).
# Java is needed only by the Spark job and is checked there.
set -euo pipefail

need=()
command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ] || need+=(redis-server)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
[ ${#need[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
  echo "lagwatch: please install: ${need[*]} (no apt-get here)" >&2
  exit 1
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "lagwatch: installing ${need[*]} with apt-get" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null

#!/usr/bin/env bash
# Installs Debian packages a test command needs, each only when its command is missing:
#   bash hack/install-packages.sh prometheus          (command `prometheus`, package `prometheus`)
#   bash hack/install-packages.sh promtool=prometheus (command `promtool`, package `prometheus`)
#
# A clean CI machine (root, Debian) installs them with apt-get; elsewhere (not root, no apt-get)
# it says what is missing and exits 0, so that the tests needing the command skip saying why.
# Idempotent: when every command is there it returns at once, without touching apt.
set -euo pipefail

say() { echo "install-packages: $*" >&2; }

[ "$#" -gt 0 ] || { say "usage: $0 COMMAND[=PACKAGE] ..."; exit 2; }

missing=()
for spec in "$@"; do
  command_name="${spec%%=*}"
  package="${spec#*=}"
  command -v "$command_name" >/dev/null 2>&1 || missing+=("$package")
done
[ "${#missing[@]}" -gt 0 ] || exit 0

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  say "missing ${missing[*]}: run as root on Debian (apt-get install ${missing[*]}); tests that need it skip"
  exit 0
fi

export DEBIAN_FRONTEND=noninteractive
# A fresh image holds no package lists; refresh them only when the install needs them.
apt-get install -y --no-install-recommends "${missing[@]}" \
  || { apt-get update -qq && apt-get install -y --no-install-recommends "${missing[@]}"; }

for spec in "$@"; do
  command -v "${spec%%=*}" >/dev/null 2>&1 || { say "${spec%%=*} still missing after apt-get"; exit 1; }
done

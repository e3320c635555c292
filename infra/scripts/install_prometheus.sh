#!/usr/bin/env bash
# Idempotent: installs Debian's prometheus package (prometheus 2.42 + promtool) unless both are on PATH.
# Works as root (CI) or through sudo. `apt-get update`, the slow part, runs only when apt does not
# know the package yet or its lists are too old to download it.
set -euo pipefail

# --with-alertmanager: also Debian's prometheus-alertmanager (for `make up`; the tests do not need it).
packages=(prometheus)
wanted=(promtool prometheus)
if [ "${1:-}" = "--with-alertmanager" ]; then
  packages+=(prometheus-alertmanager)
  wanted+=(prometheus-alertmanager)
fi
missing=0
for tool in "${wanted[@]}"; do command -v "$tool" >/dev/null 2>&1 || missing=1; done
[ "$missing" -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "install_prometheus: need root or sudo to apt-get install prometheus" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# --no-install-recommends keeps out the node exporter and friends the tests do not need.
install_package() { "${as_root[@]}" apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null; }
if ! apt-cache show prometheus >/dev/null 2>&1; then
  "${as_root[@]}" apt-get update -qq
  install_package
elif ! install_package; then
  # Lists old enough that the mirror no longer has that version: refresh once and retry.
  "${as_root[@]}" apt-get update -qq
  install_package
fi

# The package starts its service where an init system runs; the tests start their own server on
# a free port, so a packaged one listening on 9090 would only get in the way.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  "${as_root[@]}" systemctl disable --now prometheus >/dev/null 2>&1 || true
elif [ -x /etc/init.d/prometheus ]; then
  "${as_root[@]}" /etc/init.d/prometheus stop >/dev/null 2>&1 || true
  [ -x /etc/init.d/prometheus-alertmanager ] && { "${as_root[@]}" /etc/init.d/prometheus-alertmanager stop >/dev/null 2>&1 || true; }
fi

command -v promtool >/dev/null 2>&1 || { echo "install_prometheus: promtool still not on PATH" >&2; exit 1; }
echo "install_prometheus: $(promtool --version 2>&1 | head -1)"

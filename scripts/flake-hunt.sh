#!/usr/bin/env bash
#
# flake-hunt.sh -- runs CI (.ci/run) N times in a row on fresh clones while
# another PostgreSQL cluster is kept busy, and says how each run ended.
#
# Why: a suite that fails once in ten runs stops one submission in ten from
# landing, and a flake is found only by running the whole suite many times on
# a loaded machine (issue 10's "done when": five consecutive passes).  Each run
# clones the repository as it is committed at that moment (HEAD of its current
# branch) into a new directory and runs `CI=true bash .ci/run` there, the way
# CI does; the load is a stock PostgreSQL 15 cluster without ptrack, on its
# own copy of the binaries (CI's package upgrades cannot change it under the
# load), under `pgbench -c2 -j1 -R300` for the whole hunt.
#
# Needs root (CI's own requirement) and Debian's postgresql-15 installed.
# Creates the user loadpg if missing; the load cluster listens on 127.0.0.1
# only, and is stopped by pg_ctl at the end, also on failure.  Writes under
# WORKDIR (default /var/tmp/ptrack-flake-hunt): runs/<time>/ (each clone),
# runs/<time>.log (its output) and summary.txt (one line per run: revision,
# exit status, seconds, load average).  Exits 1 if any run failed.
#
# Usage: scripts/flake-hunt.sh [--runs N] [--workdir DIR] [--port N] [--keep-clones]
#   --runs N        runs in a row (default 5)
#   --workdir DIR   where clones, logs and the load cluster go
#   --port N        the load cluster's port on 127.0.0.1 (default 5600)
#   --keep-clones   keep each run's clone (default: only the failed ones)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
runs=5
workdir=/var/tmp/ptrack-flake-hunt
port=5600
keep=0
while [ $# -gt 0 ]; do
    case $1 in
        --runs) runs=${2:?}; shift 2 ;;
        --workdir) workdir=${2:?}; shift 2 ;;
        --port) port=${2:?}; shift 2 ;;
        --keep-clones) keep=1; shift ;;
        -h|--help) sed -n '/^# Usage:/,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "flake-hunt: unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done
[[ $runs =~ ^[0-9]+$ ]] || { echo "flake-hunt: --runs takes a number" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "flake-hunt: run as root (CI does; .ci/run installs packages)" >&2; exit 1; }
[ -x /usr/lib/postgresql/15/bin/postgres ] ||
    { echo "flake-hunt: Debian's postgresql-15 is not installed (apt-get install postgresql-15)" >&2; exit 1; }

mkdir -p "$workdir/runs"
load=$workdir/load
bin=$load/usr/lib/postgresql/15/bin
data=$load/data
pgbench_pid=''

stop_load() {
    [ -n "$pgbench_pid" ] && kill "$pgbench_pid" 2>/dev/null || true
    [ -f "$data/postmaster.pid" ] && runuser -u loadpg -- "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1 || true
}
trap stop_load EXIT

# The load cluster, on a private copy of the stock binaries.
id loadpg >/dev/null 2>&1 || useradd --system --create-home --shell /bin/bash loadpg
if [ ! -x "$bin/postgres" ]; then
    mkdir -p "$load/usr/lib" "$load/usr/share"
    cp -a /usr/lib/postgresql "$load/usr/lib/"
    cp -a /usr/share/postgresql "$load/usr/share/"
fi
if [ ! -f "$data/PG_VERSION" ]; then
    mkdir -p "$data" && chown loadpg "$load" "$data"
    runuser -u loadpg -- "$bin/initdb" -D "$data" -A trust >/dev/null
    printf "listen_addresses = '127.0.0.1'\nport = %s\nunix_socket_directories = ''\nshared_buffers = 128MB\n" \
        "$port" >>"$data/postgresql.conf"
    fresh=1
else
    fresh=0
fi
runuser -u loadpg -- "$bin/pg_ctl" -D "$data" -l "$load/server.log" -w start >/dev/null
[ $fresh -eq 1 ] && runuser -u loadpg -- "$bin/pgbench" -h 127.0.0.1 -p "$port" -i -q -s 20 postgres >/dev/null 2>&1
runuser -u loadpg -- "$bin/pgbench" -h 127.0.0.1 -p "$port" -c2 -j1 -R300 -T 360000 postgres \
    >"$workdir/pgbench.log" 2>&1 &
pgbench_pid=$!

failed=0
for i in $(seq 1 "$runs"); do
    name=$(date -u +%Y%m%d-%H%M%S)
    clone=$workdir/runs/$name
    git clone -q "$repo" "$clone"
    rev=$(git -C "$clone" rev-parse --short HEAD)
    start=$SECONDS
    status=0
    (cd "$clone" && CI=true bash .ci/run) >"$clone.log" 2>&1 || status=$?
    line="run $i rev $rev status $status time $((SECONDS - start)) s load $(cut -d' ' -f1-3 /proc/loadavg) log $clone.log"
    echo "$line" | tee -a "$workdir/summary.txt"
    if [ $status -ne 0 ]; then
        failed=1
    elif [ $keep -eq 0 ]; then
        rm -rf "$clone"
    fi
done
exit $failed
